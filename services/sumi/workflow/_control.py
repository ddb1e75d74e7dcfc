"""What the workflow engine asks the control log: its Workflows, their worker's allocation, the code.

Questions only, over the one existing fold of the control log the engines share
(today `sumi.queue._control.ControlTable`; the public control fold of the "One
house" issue replaces it here and nowhere else). Pure.
"""

from dataclasses import dataclass

from sumi.control.forms.names import DURABLE_WORKFLOW, WORKER_VERSION
from sumi.queue._control import LIVE, Code, ControlTable
from sumi.workflow._decide import WorkflowView


@dataclass(frozen=True)
class Workflow:
    uid: str
    space: str
    worker: str
    class_name: str
    state: str


class WorkflowControl:
    def __init__(self, table: ControlTable | None = None) -> None:
        self.table = table or ControlTable()

    def fold(self, rec: object) -> None:
        self.table.fold(rec)

    def workflow(self, uid: str) -> Workflow | None:
        res = self.table.resources.get(uid)
        if res is None or res.form != DURABLE_WORKFLOW:
            return None
        return Workflow(uid, res.space, res.spec["worker"]["resourceUid"], res.spec["className"], res.state)

    def workflows(self) -> list[Workflow]:
        return [w for uid in list(self.table.resources) if (w := self.workflow(uid)) is not None]

    def allocation(self, wf: Workflow) -> list[tuple[str, int]]:
        return self.table.allocation(wf.worker)

    def ready(self, wf: Workflow) -> bool:
        """WF-3, WF-9: live, and every weighted Version verified with the class exported."""
        allocation = self.allocation(wf)
        if wf.state not in LIVE or not allocation:
            return False
        for uid, _ in allocation:
            v = self.table.resources.get(uid)
            seen = (v.observed or {}) if v is not None and v.form == WORKER_VERSION else {}
            if seen.get("verified") is not True or wf.class_name not in (seen.get("workflowClasses") or ()):
                return False
        return True

    def view(self, uid: str) -> WorkflowView:
        wf = self.workflow(uid)
        if wf is None:
            return WorkflowView(exists=False)
        return WorkflowView(True, wf.space, self.ready(wf), closed=wf.state == "deleting")

    def deleting(self, uid: str) -> str | None:
        """The ID of the Workflow's unfinished delete Operation, once the control plane started it."""
        op = self.table.unfinished_delete(uid)
        return op.id if op is not None and op.state != "pending" else None

    def code(self, version_uid: str) -> Code | None:
        return self.table.code(version_uid)

    def workflow_bindings(self, version_uid: str) -> dict[str, str]:
        v = self.table.resources.get(version_uid)
        if v is None:
            return {}
        return {b["name"]: b["resource"]["resourceUid"] for b in v.spec.get("workflowBindings") or []}
