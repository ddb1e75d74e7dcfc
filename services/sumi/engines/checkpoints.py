"""A shell's snapshots of its changelog: restore plus tail fold at a take-over, capture when quiet.

A processor that is its changelog's only writer and folds each record as it decides it holds,
whenever nothing it decided is still uncommitted, exactly the fold of each partition up to the
last offset it wrote there (or the end the take-over's fold found): a snapshot's moment. The
shell says so (`idle`, after a commit that left its outbox empty; `rebuilt`, after a take-over's
fold), and a partition is snapshotted once its log grew enough since its last snapshot
(`Snapshots.due`). Under a load that never lets the outbox go idle, none is taken until it does.

A changelog others append to as well (`shared`: the queue engine's log, its input) holds records
the processor has not read yet before the offsets it wrote: its state is the fold of a partition
up to where it has read it (`read`), and only once no outbox is busy and it has read past every
offset they wrote there. A partition that went quiet is snapshotted after less growth
(`snapshot_quiet_seconds`), so an engine restarted after its load ended folds next to nothing.

At a take-over each partition's latest snapshot is restored first and the log folded only after
the offset it covers: the same state as the whole fold, since a snapshot is the fold of a
prefix of the log. A snapshot that cannot be read only costs time: the fold starts at 0.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from aiokafka import TopicPartition

from sumi.core import ids
from sumi.core.config import Settings
from sumi.core.records import Record
from sumi.engines.snapshots import Snapshots
from sumi.wire.outbox import Box

log = logging.getLogger(__name__)


class Snapshotted(Protocol):
    """What a processor with snapshots supplies: its state of one partition as chunks, and back."""

    def capture(self, partition: int, snapshot_id: str) -> tuple[Iterable[Record], int]:
        """The chunks of the partition's state, and how many items they hold."""

    def restore(self, partition: int, chunks: list[Record]) -> Awaitable[None]:
        """Put the chunks into the state as if folded; raise, leaving the state as it was, if
        they are not this processor's."""


class Checkpoints:
    def __init__(
        self, settings: Settings, engine: str, changelog_topic: str, processor: Snapshotted, shared: bool = False
    ) -> None:
        self.processor = processor
        self.topic = changelog_topic
        self.store = Snapshots(settings, engine) if settings.snapshot_records > 0 else None
        self.covered: dict[int, int] = {}  # partition -> the offset the state is the fold up to, when idle
        self.taken: dict[int, int] = {}  # partition -> what its latest snapshot covers
        self.shared = shared  # `covered` is then where each partition has been read to
        self.quiet_s = settings.snapshot_quiet_seconds
        self.outboxes: list[Box] = []  # a shared changelog's writers: the state is a fold when they are idle
        self.folded_at: dict[int, float] = {}  # a shared changelog's partition -> when it last read a record
        self.timer: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        if self.store is not None:
            await self.store.start()

    async def stop(self) -> None:
        self._unwatch()
        if self.store is not None:
            await self.store.stop()

    async def restore(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's latest snapshot into the state; where to fold the log from."""
        self.covered, self.taken = {}, {}  # a take-over: what an earlier one noted is another state's
        starts: dict[TopicPartition, int] = {}
        if self.store is None:
            return starts
        for tp in tps:
            try:
                got = await self.store.latest(tp.partition)
                if got is None:
                    continue
                await self.processor.restore(tp.partition, got.chunks)
            except Exception:
                log.exception("%s: the snapshot of partition %d is not used", self.store.engine, tp.partition)
                continue
            starts[tp] = self.taken[tp.partition] = got.header.covers
            self.store.restored(tp.partition, got.header.entries)
        log.info("%s: restored %d snapshots, folding the log after them", self.store.engine, len(starts))
        return starts

    def rebuilt(self, ends: dict[TopicPartition, int]) -> None:
        """The take-over read the log to these ends: the state is their fold now."""
        self.covered = {tp.partition: end for tp, end in ends.items()}
        self._take_due()

    def idle(self, written: dict[tuple[str, int], int]) -> None:
        """Nothing decided is uncommitted (`written`: the last offset written per partition)."""
        if not self.shared:
            for (topic, p), offset in written.items():
                if topic == self.topic and p in self.covered and offset + 1 > self.covered[p]:
                    self.covered[p] = offset + 1
        self._take_due()

    def watch(self, outboxes: list[Box]) -> Callable[[], None]:
        """A generation's outboxes; what ends the watch (the state is dropped after it)."""
        self.outboxes = outboxes
        return self._unwatch

    def _unwatch(self) -> None:
        self.outboxes, self.covered = [], {}
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def read(self, partition: int, offset: int) -> None:
        """A shared changelog's partition is folded up to `offset` (its next to read)."""
        self.covered[partition] = offset
        self.folded_at[partition] = asyncio.get_running_loop().time()
        self._take_due()
        if self.timer is None and self.store is not None:
            self.timer = asyncio.get_running_loop().call_later(self.quiet_s, self._look_again)

    def _look_again(self) -> None:
        # Every `quiet_s` while something read is in no snapshot: a partition gone quiet gets one.
        self.timer = None
        self._take_due()
        if any(at > self.taken.get(p, 0) for p, at in self.covered.items()):
            self.timer = asyncio.get_running_loop().call_later(self.quiet_s, self._look_again)

    def _folds(self) -> dict[int, int]:
        """Each partition's offset the state is the fold up to now."""
        if not self.shared:
            return self.covered
        if any(box.busy for box in self.outboxes):
            return {}
        written = {
            p: max((box.written.get((self.topic, p), -1) for box in self.outboxes), default=-1) for p in self.covered
        }
        return {p: at for p, at in self.covered.items() if at > written[p]}

    def _take_due(self) -> None:
        # One partition at a time: a capture holds the event loop (about 2 s for 33 k workflow
        # instances of 100 k here), and several at once could outlast the group's session.
        if self.store is None or self.store.writing:
            return
        now = asyncio.get_running_loop().time()
        for p, covers in self._folds().items():
            quiet_for = now - self.folded_at.get(p, 0.0) if self.shared else 0.0
            if self.store.due(p, covers - self.taken.get(p, 0), quiet_for):
                snapshot_id = ids.new_ulid()
                chunks, entries = self.processor.capture(p, snapshot_id)
                self.taken[p] = covers
                self.store.write_soon(p, covers, snapshot_id, list(chunks), entries)
                return
