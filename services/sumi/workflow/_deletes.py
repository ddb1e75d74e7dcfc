"""A Workflow's delete, as the workflow engine carries it out (WF-13, WF-14).

Intake is closed by the decisions themselves (a deleting Workflow answers as deleted); here
the contexts of its instances are stopped, and, partition by partition of the instance log
(those this replica owns), once every stop of the partition's instances is confirmed each is
purged, and the partition's share of the delete Operation reported done once the purges have
committed (`operation.report` with `partition`; a partition without instances reports too).
The control plane has the Operation succeed once every partition has reported, each counted
once however often it is. A stop not confirmed in time is proven the only certain way, by the
runtimes' exit, and the same Operation is reported `reconciling` meanwhile. It reaches the
engine only through the `Purger` port.
"""

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

from sumi.core import records as r
from sumi.core.commands import Command, OperationReport
from sumi.core.problems import Problem
from sumi.workflow._runs import Live
from sumi.workflow.rules._control import Workflow, WorkflowControl
from sumi.workflow.rules._table import InstanceTable

# A delete whose contexts have not all confirmed their stop by then takes the stop as unproven
# (WF-14): it reports the same Operation `reconciling` and proves the stop by the runtimes' exit.
STOP_PROOF_MS = 5000


class Purger(Protocol):
    """What a delete needs of the engine: the fold, the live runs, how records commit and
    reach the control plane, and the runtimes' restart."""

    table: InstanceTable
    control: WorkflowControl
    owned: frozenset[int]

    @property
    def runs(self) -> Mapping[str, Live]: ...

    def now(self) -> int: ...

    def emit(self, key: str, records: Sequence[r.Record]) -> "asyncio.Future[None]": ...

    def control_command(self, space: str, command: Command) -> r.CommandSubmitted: ...

    async def restart_runtimes(self) -> None: ...


class Deletes:
    def __init__(self, engine: Purger) -> None:
        self.engine = engine
        # (delete Operation, partition) purged and reported: never purged or reported twice here
        self.reported: set[tuple[str, int]] = set()
        self.stopping_since: dict[str, int] = {}  # delete Operation -> when it first waited for a stop
        self.reconciling: set[str] = set()  # delete Operations reported `reconciling`
        self._restarting: asyncio.Future[None] | None = None
        self._reporting: set[asyncio.Future[None]] = set()  # part reports waiting for their purges

    def step(self) -> None:
        """Every Workflow being deleted moves on as far as it can now, in each owned partition."""
        engine = self.engine
        for wf in engine.control.workflows():
            op = engine.control.deleting(wf.uid) if wf.state == "deleting" else None
            if op is None:
                continue
            todo = [p for p in sorted(engine.owned) if (op, p) not in self.reported]
            if not todo:
                continue
            keys, now = _by_partition(engine.table, wf.uid), engine.now()
            stopping = [p for p in todo if not self._purge(wf, op, p, keys.get(p, []), now)]
            if not stopping:
                self.stopping_since.pop(op, None)
            elif now - self.stopping_since.setdefault(op, now) >= STOP_PROOF_MS:
                self._reconcile_stop(wf.space, op)

    def _purge(self, wf: Workflow, op: str, partition: int, keys: list[str], now: int) -> bool:
        """Stop the live contexts of the Workflow's instances in `partition`; once none is left,
        purge them and report the partition's share of the delete. Whether it is done."""
        engine = self.engine
        live = [k for k in keys if k in engine.runs]
        for k in live:
            engine.runs[k].stop()
        if live:  # purged once every context is confirmed stopped
            return False
        purges = [engine.emit(k, [r.InstancePurged(wf.uid, engine.table.instances[k].instance_id, now)]) for k in keys]
        if keys:  # the partition's marker, keyed by one of its instances so it lands in the partition
            purges.append(engine.emit(keys[0], [r.InstancesPurged(wf.uid, now, op)]))
        partitions = engine.table.partitions
        report = OperationReport(
            operation_id=op, outcome="succeeded", effect="complete", partition=partition, partitions=partitions
        )
        self._report_after(purges, wf.space, report)
        self.reported.add((op, partition))
        return True

    def _report_after(self, purges: list["asyncio.Future[None]"], space: str, report: OperationReport) -> None:
        """The part's report goes out only once its purges have committed: a share reported done
        is never lost to a crash (whatever outbox each partition's records take)."""
        engine = self.engine
        if not purges:
            engine.emit(space, [engine.control_command(space, report)])
            return

        async def once_committed() -> None:
            for purge in purges:
                await purge  # a failed commit ends the engine: the next one purges and reports again
            engine.emit(space, [engine.control_command(space, report)])

        task = asyncio.ensure_future(once_committed())
        self._reporting.add(task)
        task.add_done_callback(self._reporting.discard)

    def _reconcile_stop(self, space: str, op: str) -> None:
        """WF-14: a stop the runtime does not confirm (e.g. its process hangs) leaves the delete
        unproven. The same Operation is reported `reconciling` (once; effect unknown), and the stop
        is proven the only certain way: the runtime processes exit, taking every context with them
        (contexts of other instances end as stopped and replay in new ones)."""
        if op not in self.reconciling:
            self.reconciling.add(op)
            problem = Problem("backend_unavailable", "a context's stop was not confirmed; stopping its runtime")
            report = OperationReport(operation_id=op, outcome="reconciling", effect="unknown", error=problem.to_json())
            self.engine.emit(space, [self.engine.control_command(space, report)])
        if self._restarting is None or self._restarting.done():
            self._restarting = asyncio.ensure_future(self.engine.restart_runtimes())


def _by_partition(table: InstanceTable, workflow_uid: str) -> dict[int, list[str]]:
    """The keys of the Workflow's instances per partition, each list in order."""
    out: dict[int, list[str]] = {}
    for key in table.keys(workflow_uid):
        out.setdefault(table.partition_of(key), []).append(key)
    return out
