"""Message bodies read back from the queue log, for the messages the body budget left out.

A consumer of its own (the engine's reader follows the log's end and must not seek), one
read at a time; a delivered batch's missing bodies are read together.
"""

import asyncio
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer

from sumi.core import kafka
from sumi.core import records as r
from sumi.queue._state import Location


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
