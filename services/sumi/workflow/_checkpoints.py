"""When the workflow engine snapshots its instance log, and how a start restores from it.

The engine is the only writer of the instance log and folds each record as it decides it, in
the order its outbox commits them. So whenever the outbox has nothing put and uncommitted,
the instance table is exactly the fold of each partition up to the last offset the outbox
wrote there (or the end the rebuild found): a snapshot's moment, taken after a commit that
leaves the outbox idle (`Outbox.on_idle`) and right after the rebuild. A partition is
snapshotted once its log grew by `Settings.snapshot_records` records since its last snapshot
(and by at least half as many as that snapshot held). Under a load that never lets the
outbox go idle, none is taken until it does.
"""

import asyncio
import logging
from collections import deque
from typing import Protocol

from aiokafka import TopicPartition

from sumi.core import ids, sealing
from sumi.core.config import Settings
from sumi.core.records import WorkflowSnapshotChunk
from sumi.engines.snapshots import Snapshots
from sumi.wire.topics import partition_for
from sumi.workflow._intake import REMEMBERED_COMMANDS
from sumi.workflow.rules import _snapshot as snapshot
from sumi.workflow.rules._state import Instance

log = logging.getLogger("sumi.workflow")


class Table(Protocol):
    """What the checkpoints read and restore of the engine (so this module never imports it)."""

    instances: dict[str, Instance]
    ring: sealing.KeyRing

    def adopt(self, key: str, inst: Instance) -> None: ...

    def remember(self, command_id: str) -> None: ...


class Checkpoints:
    def __init__(self, settings: Settings, table: Table) -> None:
        self.settings = settings
        self.table = table
        self.topic = settings.topic("workflow")
        self.store = Snapshots(settings, "workflow") if settings.snapshot_records > 0 else None
        self.covered: dict[int, int] = {}  # partition -> the offset the table is the fold up to, when idle
        self.taken: dict[int, int] = {}  # partition -> what its latest snapshot covers
        # The latest decided command IDs of each partition: a command read again after a restart
        # (its group offset not yet committed) is decided once, though its decision lies before
        # the snapshot.
        self.decided: dict[int, deque[str]] = {}

    async def start(self) -> None:
        if self.store is not None:
            await self.store.start()

    async def stop(self) -> None:
        if self.store is not None:
            await self.store.stop()

    def remember(self, key: str, command_id: str) -> None:
        """A decision folded (the log's key `key`): kept for its partition's next snapshot."""
        self.remember_in(partition_for(key, self.settings.partitions), command_id)

    async def restore(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's latest snapshot into the table; where to fold the log from."""
        starts: dict[TopicPartition, int] = {}
        if self.store is None:
            return starts
        for tp in tps:
            try:
                got = await self.store.latest(tp.partition)
                if got is None:
                    continue
                if not all(isinstance(c, WorkflowSnapshotChunk) for c in got.chunks):
                    raise ValueError("not a workflow engine's snapshot")
                chunks = [c for c in got.chunks if isinstance(c, WorkflowSnapshotChunk)]
                restored = []
                for chunk in chunks:  # a chunk at a time: the loop (heartbeats) goes on between
                    restored.append(snapshot.restore([chunk], self.table.ring))
                    await asyncio.sleep(0)
            except Exception:  # a snapshot only saves time: without one the fold starts at 0
                log.exception("workflow engine: the snapshot of partition %d is not used", tp.partition)
                continue
            for instances, decided in restored:
                for key, inst in instances.items():
                    self.table.adopt(key, inst)
                for command_id in decided:
                    self.table.remember(command_id)
                    self.remember_in(tp.partition, command_id)
            starts[tp] = self.taken[tp.partition] = got.header.covers
            self.store.restored(tp.partition, got.header.entries)
        log.info("workflow engine: restored %d snapshots, folding the log after them", len(starts))
        return starts

    def remember_in(self, partition: int, command_id: str) -> None:
        kept = self.decided.setdefault(partition, deque(maxlen=REMEMBERED_COMMANDS // self.settings.partitions + 1))
        kept.append(command_id)

    def rebuilt(self, ends: dict[TopicPartition, int]) -> None:
        """The rebuild read the log to these ends: the table is their fold now."""
        self.covered = {tp.partition: end for tp, end in ends.items()}
        self._take_due()

    def idle(self, written: dict[tuple[str, int], int]) -> None:
        """The outbox committed everything put so far (`written`: its last offset per partition)."""
        for (topic, p), offset in written.items():
            if topic == self.topic and offset + 1 > self.covered.get(p, 0):
                self.covered[p] = offset + 1
        self._take_due()

    def _take_due(self) -> None:
        # One partition at a time: a capture holds the event loop (about 2 s for 33 k instances
        # of 100 k here), and several at once could outlast the commands group's session.
        if self.store is None or self.store.writing:
            return
        for p, covers in self.covered.items():
            if self.store.due(p, covers - self.taken.get(p, 0)):
                self._take(p, covers)
                return

    def _take(self, partition: int, covers: int) -> None:
        snapshot_id = ids.new_ulid()
        n = self.settings.partitions
        chunks, entries = snapshot.capture(
            self.table.instances,
            lambda key: partition_for(key, n) == partition,
            self.table.ring,
            list(self.decided.get(partition, ())),
            snapshot_id,
        )
        self.taken[partition] = covers
        assert self.store is not None
        self.store.write_soon(partition, covers, snapshot_id, list(chunks), entries)
