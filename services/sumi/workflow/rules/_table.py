"""The workflow engine's instance table: the fold of the instance log, and what is derived
from it alone — each Workflow's instance keys (a delete purges them), the counts per status
and partition (WF-9) and the heap of durable due times (sleeps, wait timeouts, retries, retention purges).

Pure: no I/O, no clock. The engine folds each record into it as it decides it; a restart
rebuilds it from the log (or a snapshot, `adopt`), so every timer is re-armed from the
records alone.
"""

import heapq
from collections.abc import Iterator

from sumi.core import records as r
from sumi.wire.topics import partition_for
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._state import Counts, Instance


class InstanceTable:
    def __init__(self, limits: d.Limits, partitions: int = 1) -> None:
        self.limits = limits
        self.partitions = partitions  # of the instance log: the key's partition is Kafka's
        self.instances: dict[str, Instance] = {}
        self.keys_of: dict[str, set[str]] = {}  # workflow UID -> its instances' keys
        self.counts = Counts(partition_of=self.partition_of)  # per Workflow, partition and status (WF-9)
        self.due: list[tuple[int, str]] = []  # (due time, key); stale entries are skipped
        self.armed: dict[str, int] = {}  # the due time each instance has in `due`

    def fold(self, key: str, rec: r.WorkflowRecord) -> Instance | None:
        """Fold one record of instance `key`; the instance it purged, if it did."""
        inst = self.counts.fold(self.instances.get(key), rec, key)
        if inst is None:
            return None
        if not inst.purged:
            self._index(key, inst)
            return None
        self.instances.pop(key, None)
        self.armed.pop(key, None)
        keys = self.keys_of.get(inst.workflow_uid)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.keys_of[inst.workflow_uid]
        return inst

    def adopt(self, key: str, inst: Instance) -> None:
        """An instance as a snapshot holds it: in the table as if folded."""
        self.counts.add(inst, key)
        self._index(key, inst)

    def _index(self, key: str, inst: Instance) -> None:
        self.instances[key] = inst
        self.keys_of.setdefault(inst.workflow_uid, set()).add(key)
        due = d.next_due(inst, self.limits)
        if due is not None and self.armed.get(key) != due:  # one heap entry per due time, not per record
            self.armed[key] = due
            heapq.heappush(self.due, (due, key))

    def due_now(self, now: int) -> Iterator[tuple[str, Instance]]:
        """Every instance whose due time has come. An entry of an earlier due time comes up
        again only while the instance is still due, so once the engine has decided what is due
        for it (which moves it on, and arms its next due time with an entry of its own) the
        rest of its entries are skipped."""
        while self.due and self.due[0][0] <= now:
            at, key = heapq.heappop(self.due)
            if self.armed.get(key) == at:
                del self.armed[key]
            inst = self.instances.get(key)
            due = d.next_due(inst, self.limits) if inst is not None else None
            if inst is None or due is None or due > now:
                continue  # stale: the instance moved on (its current due time has its own entry)
            yield key, inst

    def next_due(self) -> int | None:
        return self.due[0][0] if self.due else None

    def keys(self, workflow_uid: str, partition: int | None = None) -> list[str]:
        """The keys of a Workflow's instances (in one partition), in order."""
        keys = self.keys_of.get(workflow_uid, ())
        return sorted(k for k in keys if partition is None or self.partition_of(k) == partition)

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.partitions) if self.partitions > 1 else 0
