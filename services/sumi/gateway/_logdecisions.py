"""Workflow decisions read from the instance log, the moment the engine's transaction commits.

The workflow engine writes each command's `CommandDecided` into the instance log
(`<prefix>.workflow`) in the transaction that makes the decision. Waiting for the projection's
`decisions` row instead put every answer behind every step row the projection applies before
it (12-19 ms idle, over a second under load; issue 43). So each gateway reads the instance log
itself: one read_committed consumer of its own, no group, every partition assigned and sought
to its end before the gateway takes its first request. A request registers its command ID
(`Decisions.expect`) before it appends the command, and the decision is written after the
command, so it lies past that end: none passes a waiting request by. Any number of gateways
read side by side, each for the requests it holds.

Nearly all the log holds is steps: a record is taken for a decision by its schema fingerprint
and its command ID read from its bytes (`sumi.workflow.replies`); only a decision someone here
waits for is decoded. The answer carries where the decision lies (partition, offset), so a read
after it can wait for the projection to get there (`_positions`) without the write waiting.

What the log cannot give, the `decisions` row still does (`_decisions`, resolving the same
waiting requests): the answer to a command whose ID the engine decided before (a retry with the
same Idempotency-Key: the engine remembers the ID and decides nothing again, and the row keeps
the first decision), and any decision committed while this reader was not positioned (it starts
again at the end after a broker outage). The control processor's decisions (Spaces, tokens,
Resources) still come only that way: their log is not read here.
"""

import asyncio
import json
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.gateway._decisions import Decisions
from sumi.wire import codec, kafka
from sumi.workflow.replies import DECIDED_FP, command_id_of

log = logging.getLogger("sumi.gateway")
IDLE_RETURN_MS = 600_000


class LogDecisions:
    def __init__(self, settings: Settings, decisions: Decisions) -> None:
        self.topic = settings.topic("workflow")
        self.settings = settings
        self.decisions = decisions
        self.positioned = asyncio.Event()  # reading from an end noted before any request was let in
        self._task: asyncio.Task[None] | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self, wait: float) -> None:
        """Start reading; returns once positioned at the log's end, or after `wait` seconds (the
        requests then learn their decisions from the `decisions` rows until it is)."""
        self._task = asyncio.create_task(self._run())
        try:
            await asyncio.wait_for(self.positioned.wait(), wait)
        except TimeoutError:
            log.warning("instance log not readable yet: workflow decisions come from the read side meanwhile")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        delay = 0.1
        while True:
            consumer = self._consumer = kafka.new_consumer(self.settings, auto_offset_reset="latest")
            try:
                await consumer.start()
                await self._position(consumer)
                delay = 0.1
                await self._read(consumer)
            except asyncio.CancelledError:
                raise
            except (KafkaError, OSError, RuntimeError) as exc:
                log.warning("instance log reader: %r; starting again at its end in %.1fs", exc, delay)
            finally:
                self.positioned.clear()
                await kafka.stop(consumer)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def end(self, partition: int) -> int | None:
        """The committed end of one partition of the log now (None: not known now). A position
        at or past it was never a write's answer."""
        consumer = self._consumer
        if consumer is None or not self.positioned.is_set():
            return None
        tp = TopicPartition(self.topic, partition)
        try:
            return int((await consumer.end_offsets([tp]))[tp])
        except (KafkaError, KeyError):
            return None

    async def _position(self, consumer: AIOKafkaConsumer) -> None:
        tps = await kafka.partitions(consumer, self.topic)
        consumer.assign(tps)
        for tp, end in (await consumer.end_offsets(tps)).items():
            consumer.seek(tp, end)
        self.positioned.set()

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            # Nothing is done between polls: an empty one need not come back (the consumer's
            # fetches long-poll on their own, and a stop cancels this wait).
            for messages in (await consumer.getmany(timeout_ms=IDLE_RETURN_MS)).values():
                for message in messages:
                    self.take(message.value, message.partition, message.offset)

    def take(self, value: bytes | None, partition: int, offset: int) -> None:
        """One record of the log: a decision someone here waits for answers them; the rest is skipped unread."""
        if value is None or value[2:10] != DECIDED_FP or not self.decisions.waits_for(command_id_of(value)):
            return
        rec = codec.decode(value)
        if isinstance(rec, r.CommandDecided):
            self.decisions.resolve([row_of(rec, partition, offset)])


def row_of(rec: r.CommandDecided, partition: int, offset: int) -> dict[str, Any]:
    """The decision as its `decisions` row reads (documents parsed), and where it lies."""
    return {
        "command_id": rec.commandId,
        "accepted": rec.accepted,
        "status": rec.status,
        "operation_id": rec.operationId,
        "problem": None if rec.problem is None else json.loads(rec.problem),
        "result": None if rec.result is None else json.loads(rec.result),
        "position": (partition, offset),
    }
