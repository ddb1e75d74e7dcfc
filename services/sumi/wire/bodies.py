"""Message bodies read back from the queue log, at the places the state or a read model keeps.

A body lives in the log only, in its `MessageAccepted`: the queue engine reads back the bodies
its budget left out when it delivers their batch, and the gateway the bodies a peek shows (the
read model keeps where each message lies, not its body). A consumer of its own (a reader that
follows the log's end must not seek), one read at a time; the bodies of one batch or one peek
are read together.
"""

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer

from sumi.core import records as r
from sumi.wire import kafka
from sumi.wire.topics import Location


class BodyReader:
    def __init__(self, consumer: AIOKafkaConsumer, topic: str) -> None:
        self.consumer = consumer
        self.topic = topic
        self.lock = asyncio.Lock()

    async def read(self, at: Sequence[Location]) -> dict[Location, bytes]:
        """The bodies of the MessageAccepted at these locations (one that is not there is left out)."""
        async with self.lock:
            values = await kafka.read_at(self.consumer, self.topic, at)
        out: dict[Location, bytes] = {}
        for loc, value in values.items():
            rec = kafka.decode(value)
            if isinstance(rec, r.MessageAccepted):
                out[loc] = rec.body
        return out
