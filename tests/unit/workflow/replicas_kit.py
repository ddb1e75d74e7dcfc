"""Workflow engine replicas in unit tests, sharing the instance log's partitions: each owns some
partitions and holds only their instances; what one sends the control plane is decided into one
control state, as the control processor would, and every replica reads that state back, as it
folds the control log. A replica's records commit when the test says (or at once)."""

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

from sumi.control import ControlState
from sumi.control.rules.forms.names import DURABLE_WORKFLOW
from sumi.core import records as r
from sumi.core.commands import Command, submitted
from sumi.wire.topics import instance_key, partition_for
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._control import WorkflowControl
from sumi.workflow.rules._table import InstanceTable
from tests.decisions_kit import NOW, cmd, deploy, new_state, res, run, verified, worker

PARTITIONS = 4
_ids = itertools.count()


class FakeRun:
    def __init__(self) -> None:
        self.stops = 0

    def stop(self, after_stop: list[Any] | None = None) -> None:
        self.stops += 1


class Replica:
    """The ports of `Deletes` and `CountReports` over a real instance table and control fold."""

    def __init__(self, state: ControlState, owned: Sequence[int], partitions: int = PARTITIONS) -> None:
        self.table = InstanceTable(d.Limits(retention_ms=3_600_000), partitions)
        self.control = WorkflowControl()
        self.control.state = state
        self.owned = frozenset(owned)
        self.runs: dict[str, FakeRun] = {}
        self.clock = NOW
        self.auto_commit = True
        self.uncommitted: list[asyncio.Future[None]] = []
        self.commands: list[Command] = []  # what it sent the control plane, in order
        self.decided: list[Any] = []  # the control records those commands were decided into
        self.restarts = 0
        self.restarted = asyncio.Event()  # a runtime restart ends when the test sets it

    def now(self) -> int:
        return self.clock

    def emit(self, key: str, records: Sequence[Any]) -> "asyncio.Future[None]":
        committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for rec in records:
            if isinstance(rec, r.CommandSubmitted):
                self.decided += run(self.control.state, rec)
            elif isinstance(rec, r.WorkflowRecord) and not isinstance(rec, r.InstancesPurged):
                assert partition_for(key, self.table.partitions) in self.owned, "a record of another's partition"
                self.table.fold(key, rec)
        if self.auto_commit:
            committed.set_result(None)
        else:
            self.uncommitted.append(committed)
        return committed

    def commit(self) -> None:
        for fut in self.uncommitted:
            fut.set_result(None)
        self.uncommitted = []

    def control_command(self, space: str, command: Command) -> r.CommandSubmitted:
        self.commands.append(command)
        return submitted(command, command_id=f"w{next(_ids)}", space=space, principal="sumi-workflow", now=NOW)

    async def restart_runtimes(self) -> None:
        self.restarts += 1
        await self.restarted.wait()


def workflow() -> tuple[ControlState, str]:
    """A control state with one Workflow that is Ready: (state, its UID)."""
    s = new_state()
    w = worker(s)
    deploy(s, w, (verified(s, w, classes=("Flow",)), 100))
    spec = {"worker": {"resourceUid": w}, "className": "Flow"}
    # A command ID of its own: the UID, and so which partition each instance key is in, is the same in every run.
    run(s, cmd("resource.create", {"name": "wf", "form": DURABLE_WORKFLOW, "spec": spec}, cid="c-wf"))
    return s, str(res(s, "wf").uid)


def seed(replicas: Sequence[Replica], uid: str, statuses: Sequence[str]) -> dict[str, str]:
    """One instance per status given, each held by the replica owning its partition: key -> status."""
    keys = {}
    for n, status in enumerate(statuses):
        key = instance_key(uid, f"i{n}")
        owner = next(x for x in replicas if x.table.partition_of(key) in x.owned)
        owner.table.fold(key, r.InstanceCreated(uid, f"i{n}", "demo", NOW))
        if status != "queued":
            owner.table.fold(key, r.InstanceStatusChanged(uid, f"i{n}", status, NOW))
        keys[key] = status
    return keys
