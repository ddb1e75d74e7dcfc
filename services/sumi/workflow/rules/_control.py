"""What the workflow engine asks the control log: its Workflows, their worker's allocation, the code.

Questions only, over the one public fold of the control log (`sumi.control.rules.state`),
which the engine folds from every partition (every Space). Pure.
"""

from sumi.control.rules.forms import ResourceView
from sumi.control.rules.forms.durable_workflow import counts_of
from sumi.control.rules.forms.names import QUEUE
from sumi.control.rules.state import (
    LIVE,
    ControlState,
    VersionView,
    WorkflowView,
    evolve,
    serving_allocation,
    version,
    workflows,
)
from sumi.core import records as r
from sumi.workflow.rules import _decide as d

Workflow = WorkflowView


class WorkflowControl:
    def __init__(self) -> None:
        self.state = ControlState()

    def fold(self, rec: r.Record) -> None:
        evolve(self.state, rec)

    def workflow(self, uid: str) -> Workflow | None:
        space = self.state.space_of(uid)
        if space is None:
            return None
        return next((w for w in workflows(self.state, space.name) if w.uid == uid), None)

    def workflows(self) -> list[Workflow]:
        return workflows(self.state)

    def allocation(self, wf: Workflow) -> list[tuple[str, int]]:
        return serving_allocation(self.state, wf.worker) if wf.worker else []

    def ready(self, wf: Workflow) -> bool:
        """WF-3, WF-9: live, and every weighted Version verified with the class exported."""
        allocation = self.allocation(wf)
        if wf.state not in LIVE or not allocation:
            return False
        for uid, _ in allocation:
            v = version(self.state, uid)
            if v is None or not v.verified or wf.class_name not in v.workflow_classes:
                return False
        return True

    def view(self, uid: str) -> d.WorkflowView:
        wf = self.workflow(uid)
        if wf is None:
            return d.WorkflowView(exists=False)
        return d.WorkflowView(True, wf.space, self.ready(wf), closed=wf.state == "deleting")

    def deleting(self, uid: str) -> str | None:
        """The ID of the Workflow's unfinished delete Operation, once the control plane started it."""
        space = self.state.space_of(uid)
        op = space.unfinished_operation(uid) if space is not None else None
        return op.id if op is not None and op.kind == "delete" and op.state != "pending" else None

    def held_counts(self, uid: str, partition: int) -> dict[str, int]:
        """The instance counts of one partition the control plane holds for the Workflow (WF-9)."""
        space = self.state.space_of(uid)
        held = space.instance_counts.get(uid, {}).get(partition) if space is not None else None
        return counts_of(held)

    def code(self, version_uid: str) -> VersionView | None:
        return version(self.state, version_uid)

    def queue(self, uid: str) -> ResourceView | None:
        res = self.state.resource(uid)
        return res if res is not None and res.form == QUEUE else None
