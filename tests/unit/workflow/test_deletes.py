"""A Workflow's delete (`sumi.workflow._deletes`), alone: contexts stopped first, every instance
purged and the Operation reported once they are; an unconfirmed stop reconciles. Through a
fake engine with a real instance table and a clock the test sets."""

import asyncio
from collections.abc import Sequence
from typing import Any

from sumi.control.state import WorkflowView
from sumi.core import records as r
from sumi.core.commands import Command, OperationReport
from sumi.workflow import _decide as d
from sumi.workflow._deletes import STOP_PROOF_MS, Deletes
from sumi.workflow._table import InstanceTable
from tests.unit.workflow.wf_kit import T0

UID, OP = "wf_a", "op_1"


class FakeRun:
    def __init__(self) -> None:
        self.stops = 0

    def stop(self, after_stop: list[Any] | None = None) -> None:
        self.stops += 1


class FakeControl:
    """One Workflow whose delete Operation has started."""

    def workflows(self) -> list[WorkflowView]:
        return [WorkflowView(UID, "a", "flow", "wkr_1", "Flow", "deleting")]

    def deleting(self, uid: str) -> str | None:
        return OP if uid == UID else None


class FakeEngine:
    """The delete's port: emit folds and keeps what it was given; a runtime restart waits
    until the test lets it end."""

    def __init__(self, instances: int) -> None:
        self.table = InstanceTable(d.Limits(retention_ms=3_600_000))
        self.control = FakeControl()
        self.runs: dict[str, FakeRun] = {}
        self.clock = T0
        self.emitted: list[tuple[str, list[Any]]] = []
        self.restarts = 0
        self.restarted = asyncio.Event()
        for n in range(instances):
            self.table.fold(f"{UID}/i{n}", r.InstanceCreated(UID, f"i{n}", "a", T0))

    def now(self) -> int:
        return self.clock

    def emit(self, key: str, records: Sequence[Any]) -> None:
        for rec in records:
            if isinstance(rec, r.WorkflowRecord) and not isinstance(rec, r.InstancesPurged):
                self.table.fold(key, rec)
        self.emitted.append((key, list(records)))

    def control_command(self, space: str, command: Command) -> Command:
        return command

    async def restart_runtimes(self) -> None:
        self.restarts += 1
        await self.restarted.wait()

    def reports(self) -> list[str]:
        return [x.outcome for _, recs in self.emitted for x in recs if isinstance(x, OperationReport)]


def test_a_delete_purges_once_every_context_has_stopped() -> None:
    # WF-13: contexts stopped first; then every instance purged and the delete reported, once
    engine = FakeEngine(instances=3)
    run = engine.runs[f"{UID}/i1"] = FakeRun()
    deletes = Deletes(engine)  # type: ignore[arg-type]
    deletes.step()
    assert run.stops == 1 and engine.emitted == [] and len(engine.table.instances) == 3
    del engine.runs[f"{UID}/i1"]  # its stop is confirmed
    deletes.step()
    purged = [rec for _, recs in engine.emitted for rec in recs if isinstance(rec, r.InstancePurged)]
    assert sorted(p.instanceId for p in purged) == ["i0", "i1", "i2"] and engine.table.instances == {}
    assert engine.reports() == ["succeeded"]
    deletes.step()
    assert engine.reports() == ["succeeded"]


async def test_a_stop_not_confirmed_in_time_reconciles_by_the_runtimes_exit() -> None:
    # WF-14: the delete does not succeed while the stop is unproven; the same Operation reports
    # reconciling once, the runtimes restart (one restart at a time), and it succeeds after
    engine = FakeEngine(instances=1)
    engine.runs[f"{UID}/i0"] = FakeRun()
    deletes = Deletes(engine)  # type: ignore[arg-type]
    deletes.step()
    engine.clock = T0 + STOP_PROOF_MS - 1
    deletes.step()
    assert engine.reports() == []
    engine.clock = T0 + STOP_PROOF_MS
    deletes.step()
    await asyncio.sleep(0)
    engine.clock += 1
    deletes.step()
    await asyncio.sleep(0)
    assert engine.reports() == ["reconciling"] and engine.restarts == 1
    engine.restarted.set()
    del engine.runs[f"{UID}/i0"]  # the runtime's exit took the context with it
    deletes.step()
    assert engine.reports() == ["reconciling", "succeeded"] and engine.table.instances == {}
