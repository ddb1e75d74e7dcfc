"""The workflow engine's state of one instance-log partition as snapshot chunks, and back.

The shell takes and restores them (`sumi.engines.checkpoints`): when, and from where the log
is folded after one, is its. Besides the instances, a snapshot holds each partition's latest
decided command IDs: a command read again after a restart (its group offset not yet committed)
is decided once, though its decision lies before the snapshot.
"""

import asyncio
from collections import deque
from typing import Protocol

from sumi.core import sealing
from sumi.core.config import Settings
from sumi.core.records import Record, WorkflowSnapshotChunk
from sumi.wire.topics import partition_for
from sumi.workflow._intake import REMEMBERED_COMMANDS
from sumi.workflow.rules import _snapshot as snapshot
from sumi.workflow.rules._state import Instance


class Table(Protocol):
    """What the checkpoints read and restore of the engine (so this module never imports it)."""

    instances: dict[str, Instance]
    ring: sealing.KeyRing

    def adopt(self, key: str, inst: Instance) -> None: ...

    def remember(self, command_id: str) -> None: ...


class Checkpoints:
    def __init__(self, settings: Settings, table: Table) -> None:
        self.partitions = settings.partitions
        self.table = table
        self.decided: dict[int, deque[str]] = {}  # partition -> its latest decided command IDs

    def remember(self, key: str, command_id: str) -> None:
        """A decision folded (the log's key `key`): kept for its partition's next snapshot."""
        self._remember_in(partition_for(key, self.partitions), command_id)

    def _remember_in(self, partition: int, command_id: str) -> None:
        kept = self.decided.setdefault(partition, deque(maxlen=REMEMBERED_COMMANDS // self.partitions + 1))
        kept.append(command_id)

    def capture(self, partition: int, snapshot_id: str) -> tuple[list[WorkflowSnapshotChunk], int]:
        return snapshot.capture(
            self.table.instances,
            lambda key: partition_for(key, self.partitions) == partition,
            self.table.ring,
            list(self.decided.get(partition, ())),
            snapshot_id,
        )

    async def restore(self, partition: int, chunks: list[Record]) -> None:
        if not all(isinstance(c, WorkflowSnapshotChunk) for c in chunks):
            raise ValueError("not a workflow engine's snapshot")
        restored = []
        for chunk in chunks:  # a chunk at a time: the loop (heartbeats) goes on between
            assert isinstance(chunk, WorkflowSnapshotChunk)
            restored.append(snapshot.restore([chunk], self.table.ring))
            await asyncio.sleep(0)
        for instances, decided in restored:  # every chunk read: the table is changed only now
            for key, inst in instances.items():
                self.table.adopt(key, inst)
            for command_id in decided:
                self.table.remember(command_id)
                self._remember_in(partition, command_id)
