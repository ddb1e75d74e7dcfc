"""Driving workflow executions directly: a scripted Host for the step API and the Caller Binding."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from sumi.runtime import (
    EnvSpec,
    HostError,
    JsRuntime,
    Limits,
    Module,
    PyRuntime,
    StepRecord,
    WorkflowInvocation,
    WorkflowOutcome,
)

RESOLVE = {"action": "resolve"}
SUSPEND = {"action": "suspend"}
REJECT = {"action": "reject"}
_DEFAULT_STEP = {"step.do": RESOLVE, "step.sleep": RESOLVE, "step.waitForEvent": SUSPEND}
_DEFAULT_BINDING: dict[str, Any] = {
    "workflow.create": {"id": "generated-1"},
    "workflow.status": {"status": "complete", "output": {"n": 1}},
    "workflow.sendEvent": {"sequence": 1},
    "workflow.terminate": {"status": "terminated"},
}

Reply = dict[str, Any] | HostError | Callable[[dict[str, Any]], Any]


@dataclass
class StepHost:
    """Answers host calls from a script: `steps` by step name, `methods` by method; records every call."""

    steps: dict[str, Reply] = field(default_factory=dict)
    methods: dict[str, Reply] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, context_id: str, method: str, args: dict[str, Any]) -> Any:
        self.calls.append((method, args))
        if method == "step.begin":  # asked before an effect past the invocation's limits (WF-38)
            reply = self.methods.get(method, RESOLVE)
        elif method.startswith("step."):
            reply = self.steps.get(args["name"], _DEFAULT_STEP[method])
        elif method == "workflow.get":
            reply = self.methods.get(method, {"id": args["id"]})
        else:
            reply = self.methods.get(method, _DEFAULT_BINDING.get(method))
        if callable(reply):
            reply = reply(args)
        if inspect.isawaitable(reply):
            reply = await reply
        if isinstance(reply, HostError):
            raise reply
        return reply

    def steps_called(self) -> list[tuple[str, str]]:
        return [(m, a["name"]) for m, a in self.calls if m.startswith("step.")]


def slow(reply: dict[str, Any], seconds: float = 0.2) -> Callable[[dict[str, Any]], Any]:
    """A reply that arrives late (after the code could have moved on)."""
    return lambda args: asyncio.sleep(seconds, reply)


def done(name: str, kind: str = "do", result: Any = None) -> StepRecord:
    return StepRecord(name, kind, True, result)  # type: ignore[arg-type]


def failed(name: str, error: str = "step_failed", message: str = "boom", kind: str = "do") -> StepRecord:
    return StepRecord(name, kind, False, None, error, message)  # type: ignore[arg-type]


def invocation(
    params: Any = None,
    completed: tuple[StepRecord, ...] = (),
    pending: dict[str, str] | None = None,
    steps_left: int | None = None,
    lifetime_ends_at: int | None = None,
) -> WorkflowInvocation:
    return WorkflowInvocation(
        "W", "inst-1", params, {r.name: r for r in completed}, pending or {}, steps_left, lifetime_ends_at
    )


@dataclass
class Run:
    outcome: WorkflowOutcome
    host: StepHost


class Workflows:
    """One runtime (``javascript`` or ``python``) and the way its workers spell a workflow."""

    def __init__(self, lang: str, runtime: JsRuntime | PyRuntime) -> None:
        self.lang = lang
        self.runtime = runtime
        self.main = "worker.js" if lang == "js" else "worker.py"

    def modules(self, js: str, py: str) -> list[Module]:
        return [Module(self.main, js if self.lang == "js" else py)]

    async def run(
        self,
        js: str,
        py: str,
        inv: WorkflowInvocation | None = None,
        host: StepHost | None = None,
        env: EnvSpec | None = None,
        keep: bool = False,
        limits: Limits | None = None,
    ) -> Run:
        host = host or StepHost()
        ctx = await self.runtime.start_context(self.modules(js, py), self.main, limits or Limits(cpu_ms=5000), host)
        outcome = await asyncio.wait_for(ctx.invoke_workflow(inv or invocation(), env or EnvSpec(), host), 30)
        if not keep:
            await ctx.stop()
        self.last_context = ctx
        return Run(outcome, host)


def js_run(body: str, prelude: str = "") -> str:
    """A JS module exporting workflow class W whose run(event, step) has `body`."""
    return (
        prelude
        + "\nexport class W {\n  constructor(env) { this.env = env; }\n  async run(event, step) {\n"
        + body
        + "\n  }\n}\n"
    )


def py_run(body: str, prelude: str = "") -> str:
    lines = "\n".join("        " + line for line in body.strip("\n").splitlines())
    return (
        prelude
        + "\nclass W:\n    def __init__(self, env):\n        self.env = env\n\n    async def run(self, event, step):\n"
        + lines
        + "\n"
    )


@pytest.fixture(scope="module", params=["js", "py"])
async def wf(request: pytest.FixtureRequest) -> AsyncIterator[Workflows]:
    runtime: JsRuntime | PyRuntime = JsRuntime() if request.param == "js" else PyRuntime()
    await runtime.start()
    yield Workflows(request.param, runtime)
    await runtime.close()
