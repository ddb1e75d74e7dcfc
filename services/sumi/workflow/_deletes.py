"""A Workflow's delete, as the workflow engine carries it out (WF-13, WF-14).

Intake is closed by the decisions themselves (a deleting Workflow answers as deleted); here
the contexts of its instances are stopped, and once every stop is confirmed each instance
is purged and the delete Operation reported `succeeded`. A stop not confirmed in time is
proven the only certain way, by the runtimes' exit, and the same Operation is reported
`reconciling` meanwhile. It reaches the engine only through the `Purger` port.
"""

import asyncio
from collections.abc import Mapping, Sequence
from typing import Protocol

from sumi.core import records as r
from sumi.core.commands import Command, OperationReport
from sumi.core.problems import Problem
from sumi.workflow._control import WorkflowControl
from sumi.workflow._runs import Live
from sumi.workflow._table import InstanceTable

# A delete whose contexts have not all confirmed their stop by then takes the stop as unproven
# (WF-14): it reports the same Operation `reconciling` and proves the stop by the runtimes' exit.
STOP_PROOF_MS = 5000


class Purger(Protocol):
    """What a delete needs of the engine: the fold, the live runs, how records commit and
    reach the control plane, and the runtimes' restart."""

    table: InstanceTable
    control: WorkflowControl

    @property
    def runs(self) -> Mapping[str, Live]: ...

    def now(self) -> int: ...

    def emit(self, key: str, records: Sequence[r.Record]) -> "asyncio.Future[None]": ...

    def control_command(self, space: str, command: Command) -> r.CommandSubmitted: ...

    async def restart_runtimes(self) -> None: ...


class Deletes:
    def __init__(self, engine: Purger) -> None:
        self.engine = engine
        self.reported: set[str] = set()  # delete Operations done: never purged or reported twice
        self.stopping_since: dict[str, int] = {}  # delete Operation -> when it first waited for a stop
        self.reconciling: set[str] = set()  # delete Operations reported `reconciling`
        self._restarting: asyncio.Future[None] | None = None

    def step(self) -> None:
        """Every Workflow being deleted moves on as far as it can now."""
        engine = self.engine
        for wf in engine.control.workflows():
            op = engine.control.deleting(wf.uid) if wf.state == "deleting" else None
            if op is None or op in self.reported:
                continue
            keys = engine.table.keys(wf.uid)
            live = [k for k in keys if k in engine.runs]
            for k in live:
                engine.runs[k].stop()
            now = engine.now()
            if live:  # reported once every context is confirmed stopped
                if now - self.stopping_since.setdefault(op, now) >= STOP_PROOF_MS:
                    self._reconcile_stop(wf.space, op)
                continue
            for k in keys:
                inst = engine.table.instances[k]
                engine.emit(k, [r.InstancePurged(wf.uid, inst.instance_id, now)])
            report = OperationReport(operation_id=op, outcome="succeeded", effect="complete")
            engine.emit(wf.uid, [r.InstancesPurged(wf.uid, now, op), engine.control_command(wf.space, report)])
            self.reported.add(op)
            self.stopping_since.pop(op, None)

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
