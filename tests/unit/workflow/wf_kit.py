"""Driving the workflow engine's pure core in unit tests the way the engine does:
decide, fold what was decided, keep the log (so a rebuild can be compared)."""

import itertools
from dataclasses import dataclass, field
from typing import Any

from sumi.core import records as r
from sumi.workflow.commands import UNSET, CreateInstance, SendEvent, TerminateInstance
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._state import Instance, LogRecord, evolve

T0 = 1_700_000_000_000
WF = d.WorkflowView(exists=True, space="demo", ready=True)
_ids = itertools.count()


def caller(kind: str) -> d.Caller:
    return d.Caller(f"c{next(_ids)}", "demo", "alice", kind)


@dataclass
class Sim:
    limits: d.Limits = field(default_factory=d.Limits)
    inst: Instance | None = None
    log: list[Any] = field(default_factory=list)
    now: int = T0
    alive: bool = False
    token: str = ""

    def apply(self, decision: d.Decision, stopped: bool = True) -> d.Decision:
        """Fold the decision's records; when it asks for a stop, the context stops and after_stop follows."""
        self.fold(decision.records)
        if decision.stop and stopped:
            self.alive = False
            self.fold(decision.after_stop)
        return decision

    def fold(self, records: list[LogRecord]) -> None:
        for rec in records:
            self.log.append(rec)
            self.inst = evolve(self.inst, rec)

    def rebuilt(self) -> Instance | None:
        inst: Instance | None = None
        for rec in self.log:
            inst = evolve(inst, rec)
        return inst

    # ---- inputs ---------------------------------------------------------------------------

    def create(self, iid: str = "i1", params: Any = UNSET, wf: d.WorkflowView = WF) -> r.CommandDecided:
        dec = self.apply(
            d.create(self.inst, CreateInstance("wf_1", iid, params), wf, caller("instance.create"), self.now)
        )
        return _answer(dec)

    def event(self, type_: str, payload: Any = UNSET) -> r.CommandDecided:
        cmd = SendEvent("wf_1", "i1", type_, payload)
        return _answer(self.apply(d.event(self.inst, cmd, caller("instance.event"), self.now, self.limits, self.alive)))

    def terminate(self) -> d.Decision:
        cmd = TerminateInstance("wf_1", "i1")
        return self.apply(d.terminate(self.inst, cmd, caller("instance.terminate"), self.now, self.alive))

    def start(self, version: str = "ver_1") -> str:
        assert self.inst is not None
        self.token = f"tok{next(_ids)}"
        self.apply(d.start(self.inst, self.token, version, self.now, self.limits))
        self.alive = not self.inst.terminal
        return self.token

    def call(self, method: str, token: str | None = None, **args: Any) -> d.Decision:
        assert self.inst is not None
        return self.apply(d.call(self.inst, token or self.token, method, args, self.now, self.limits))

    def do(self, name: str, ok: bool = True, result: Any = None, config: Any = None, **kw: Any) -> d.Decision:
        args: dict[str, Any] = {"name": name, "ok": ok, "config": config or {"maxAttempts": 1}}
        if result is not None:
            args["result"] = result
        if not ok:
            args["error"] = {"name": "Error", "message": "boom"}
        return self.call("step.do", **args, **kw)

    def end(self, kind: str, **kw: Any) -> d.Decision:
        assert self.inst is not None
        self.alive = False
        return self.apply(d.outcome(self.inst, kind, self.now, **kw))

    def tick(self, to: int) -> d.Decision:
        assert self.inst is not None
        self.now = to
        return self.apply(d.due(self.inst, self.now, self.limits, self.alive))

    def statuses(self) -> list[str]:
        return [x.status for x in self.log if isinstance(x, r.InstanceStatusChanged)]


def _answer(dec: d.Decision) -> r.CommandDecided:
    answers = [x for x in dec.records if isinstance(x, r.CommandDecided)]
    assert len(answers) == 1
    return answers[0]
