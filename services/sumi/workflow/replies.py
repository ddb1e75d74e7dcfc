"""The decisions of the commands this replica submitted for other replicas' instances, read
back from the instance log (a Caller Binding's call through the log, `_remote`).

One read_committed consumer per engine, not one per call: it is assigned every partition of
the instance log and keeps them paused, reading only the partitions some call waits on.
Where a partition starts being read, nothing is missed: the first waiter of a paused partition
notes the partition's end (the last stable offset: nothing undecided lies before it) and the
consumer reads from there; every waiter submits its command only once that position is set,
so its decision, written after the command has committed, lies at or after it. Once nobody
waits on a partition it is paused again, and read from its new end the next time.

Most of what such a partition holds is other instances' steps: a record is matched as a
`CommandDecided` by its schema fingerprint (Avro single-object encoding: bytes 2..10), and its
command ID read straight from the bytes after it, so only an awaited decision is decoded.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import TopicPartition

from sumi.core import records as r
from sumi.core.problems import Problem
from sumi.wire import codec

DECIDED_FP = codec.encode(r.CommandDecided("c", "s", "p", "k", True, 200, 0))[2:10]
Answer = asyncio.Future[r.CommandDecided]


class Reader(Protocol):
    """What this needs of its consumer (aiokafka's AIOKafkaConsumer, a fake in the unit tests)."""

    def assign(self, partitions: list[TopicPartition]) -> None: ...

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    async def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0) -> dict[TopicPartition, list[Any]]: ...


@dataclass
class _Partition:
    waiters: int = 0
    # Done once the consumer reads the partition from an end noted for its current waiters.
    positioned: "asyncio.Task[None] | None" = None


class Replies:
    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.reader: Reader | None = None
        self.waiting: dict[str, Answer] = {}  # command ID -> its caller's answer
        self.parts: dict[int, _Partition] = {}
        self.reading = asyncio.Event()  # some partition is resumed

    def attach(self, reader: Reader, partitions: list[TopicPartition]) -> None:
        """The consumer, with every partition assigned and paused."""
        reader.assign(partitions)
        reader.pause(*partitions)
        self.reader = reader
        self.parts = {tp.partition: _Partition() for tp in partitions}

    @contextlib.asynccontextmanager
    async def expect(self, command_id: str, partition: int) -> AsyncIterator[Answer]:
        """The answer to a command not yet submitted: submit it inside this block, await the
        answer inside it too. Leaving the block (answered, timed out, cancelled) forgets it."""
        if self.reader is None:
            raise Problem("backend_unavailable", "the workflow engine is not reading its log yet")
        answer: Answer = asyncio.get_running_loop().create_future()
        self.waiting[command_id] = answer
        part = self.parts[partition]
        part.waiters += 1
        try:
            if part.positioned is None:
                part.positioned = asyncio.create_task(self._position(partition))
                # Its waiters may all have left: its failure is then nobody's to hear.
                part.positioned.add_done_callback(lambda t: t.cancelled() or t.exception())
            await self._positioned(part)
            yield answer
        finally:
            self.waiting.pop(command_id, None)
            part.waiters -= 1
            if part.waiters == 0:
                part.positioned = None  # a position still being noted is then dropped
                self.reader.pause(TopicPartition(self.topic, partition))
            if not self.waiting:
                self.reading.clear()

    async def _positioned(self, part: _Partition) -> None:
        task = part.positioned
        assert task is not None
        try:
            await asyncio.shield(task)  # other waiters of the partition share it
        except Exception:
            if part.positioned is task:
                part.positioned = None  # the next waiter asks again
            raise

    async def _position(self, partition: int) -> None:
        assert self.reader is not None
        tp = TopicPartition(self.topic, partition)
        end = (await self.reader.end_offsets([tp]))[tp]
        if self.parts[partition].positioned is not asyncio.current_task():
            return  # its waiters left meanwhile; a later one notes the end anew
        self.reader.seek(tp, end)
        self.reader.resume(tp)
        self.reading.set()

    async def run(self) -> None:
        assert self.reader is not None
        while True:
            await self.reading.wait()
            for messages in (await self.reader.getmany(timeout_ms=200)).values():
                for message in messages:
                    self.take(message.value)

    def take(self, value: bytes | None) -> None:
        """One record of the log: an awaited decision is answered, anything else skipped unread."""
        if value is None or value[2:10] != DECIDED_FP or not self.waiting:
            return
        answer = self.waiting.get(command_id_of(value))
        if answer is None or answer.done():
            return
        rec = codec.decode(value)
        if isinstance(rec, r.CommandDecided):
            answer.set_result(rec)


def command_id_of(value: bytes) -> str:
    """A `CommandDecided`'s command ID, its first field: an Avro string (zig-zag varint length, UTF-8)."""
    shift = n = 0
    at = 10
    while True:
        byte = value[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    length = (n >> 1) ^ -(n & 1)
    return value[at : at + length].decode("utf-8", "replace")
