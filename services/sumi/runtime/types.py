"""Shared shapes of the worker runtime: what the Host hands a runtime and what it gets back.

Both runtimes (``javascript`` in a Node.js process, ``python`` in child
processes) implement :class:`Runtime` and :class:`ExecutionContext`.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

StopReason = Literal["threw", "cpu_limit", "heap_limit", "wall_limit", "stopped", "evicted"]
STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))

# async def host_call(context_id, method, args) -> value; raise HostError to reject.
HostCall = Callable[[str, str, dict[str, Any]], Awaitable[Any]]
# def log_sink(level, text, dropped, step): what a context printed, past its rate bound; `dropped` > 0
# makes the line a notice of that many lines refused (sumi.runtime._lograte); `step` names the
# workflow step whose effect printed it, if any.
LogSink = Callable[[str, str, int, str | None], None]


class HostError(Exception):
    """A Host rejection; ``name`` is the snake_case code and cannot be reassigned."""

    _name: str
    message: str

    def __init__(self, name: str, message: str = "") -> None:
        super().__init__(f"{name}: {message}" if message else name)
        object.__setattr__(self, "_name", str(name))
        object.__setattr__(self, "message", str(message))

    @property
    def name(self) -> str:
        return self._name

    def __setattr__(self, key: str, value: Any) -> None:
        if key in ("name", "_name", "message"):
            raise AttributeError(f"HostError.{key} is read-only")
        super().__setattr__(key, value)


@dataclass(frozen=True)
class Limits:
    cpu_ms: int = 30_000
    heap_mb: int = 128
    # Bound on one invocation's elapsed time. A handler awaiting a promise that
    # never settles would otherwise hold its batch (and its context) forever;
    # 15 minutes is the wall-clock limit Cloudflare gives a queue consumer.
    wall_ms: int = 900_000

    def to_wire(self) -> dict[str, Any]:
        return {"cpuMs": self.cpu_ms, "heapMb": self.heap_mb, "wallMs": self.wall_ms}


@dataclass(frozen=True)
class Module:
    name: str
    content: str


@dataclass(frozen=True)
class QueueMessage:
    id: str
    timestamp: int
    body: bytes
    attempts: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "timestamp": self.timestamp,
            "attempts": self.attempts,
            "body": base64.b64encode(self.body).decode("ascii"),
        }


@dataclass(frozen=True)
class QueueBatch:
    id: str
    queue: str
    messages: Sequence[QueueMessage]

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "queue": self.queue, "messages": [m.to_wire() for m in self.messages]}


@dataclass(frozen=True)
class EnvSpec:
    vars: Mapping[str, str] = field(default_factory=dict)
    queue_bindings: Sequence[str] = ()
    workflow_bindings: Sequence[str] = ()  # env.NAME = a Caller Binding of a DurableWorkflow (WF-18)

    def to_wire(self) -> dict[str, Any]:
        return {
            "vars": dict(self.vars),
            "queueBindings": list(self.queue_bindings),
            "workflowBindings": list(self.workflow_bindings),
        }


@dataclass(frozen=True)
class LoadInfo:
    handlers: tuple[str, ...] = ()
    workflow_classes: tuple[str, ...] = ()
    load_error: str | None = None

    @classmethod
    def from_wire(cls, frame: Mapping[str, Any]) -> LoadInfo:
        if frame.get("loadError"):
            return cls(load_error=str(frame["loadError"]))
        return cls(tuple(frame.get("handlers") or ()), tuple(frame.get("workflowClasses") or ()))


@dataclass(frozen=True)
class InvokeResult:
    ok: bool
    reason: StopReason | None = None
    error_name: str | None = None
    error_message: str | None = None
    host_error: bool = False  # the thrown value was a Host error object itself (WF-44)

    @classmethod
    def from_wire(cls, frame: Mapping[str, Any]) -> InvokeResult:
        if frame.get("ok"):
            return cls(ok=True)
        error = frame.get("error") or {}
        return cls(
            ok=False,
            reason=frame.get("reason") or "threw",
            error_name=error.get("name"),
            error_message=error.get("message"),
            host_error=bool(error.get("hostError")),
        )

    @classmethod
    def stopped(cls, reason: StopReason = "stopped", message: str = "context was stopped") -> InvokeResult:
        return cls(ok=False, reason=reason, error_name="Error", error_message=message)


DEFAULT_LIMITS = Limits()

StepKind = Literal["do", "sleep", "wait"]


@dataclass(frozen=True)
class StepRecord:
    """One completed step, from the engine's fold of the instance log; replayed without its effect (WF-36)."""

    name: str
    kind: StepKind
    ok: bool
    result: Any = None  # document or None (do: the effect's result; wait: the event payload)
    error_name: str | None = None  # when not ok: "step_failed" | "wait_timeout"
    error_message: str | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"kind": self.kind, "ok": self.ok}
        if self.ok:
            if self.result is not None:
                wire["result"] = self.result
        else:
            wire["error"] = {"name": self.error_name or "step_failed", "message": self.error_message or ""}
        return wire


@dataclass(frozen=True)
class WorkflowInvocation:
    """One execution of a workflow run in a fresh context (WF-29..33)."""

    class_name: str
    instance_id: str
    params: Any | None  # document, or None when absent (run sees no ``params`` member)
    completed: Mapping[str, StepRecord] = field(default_factory=dict)
    pending_kinds: Mapping[str, str] = field(default_factory=dict)  # unfinished names seen: name -> kind (WF-35)
    # The Host's limits as of the context start (WF-38): new step names it may still begin, and the
    # end of its lifetime (epoch ms). The runtime asks the Host (`step.begin`) before an effect
    # beyond either; the Host decides.
    steps_left: int | None = None
    lifetime_ends_at: int | None = None

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {
            "className": self.class_name,
            "instanceId": self.instance_id,
            "completed": {name: rec.to_wire() for name, rec in self.completed.items()},
            "pendingKinds": dict(self.pending_kinds),
        }
        if self.params is not None:
            wire["params"] = self.params
        if self.steps_left is not None:
            wire["stepsLeft"] = self.steps_left
        if self.lifetime_ends_at is not None:
            wire["lifetimeEndsAt"] = self.lifetime_ends_at
        return wire


WorkflowOutcomeKind = Literal["complete", "errored", "suspended", "stopped"]
WorkflowErrorReason = Literal["run_threw", "step_failed", "step_definition_mismatch"]


@dataclass(frozen=True)
class WorkflowOutcome:
    """How one execution ended.

    ``suspended``: a step is pending on the Host (retry scheduled, sleeping, waiting, or a Host rejection such
    as a limit); the context is left running with run's Promise pending and the engine stops it.
    ``stopped``: the context stopped (limits, stop(), process exit) before run settled.
    """

    kind: WorkflowOutcomeKind
    output: Any | None = None  # complete: the document or None
    reason: str | None = None  # errored: WorkflowErrorReason; stopped: the StopReason
    message: str | None = None

    @classmethod
    def from_wire(cls, frame: Mapping[str, Any]) -> WorkflowOutcome:
        """The runtime's reply; a queue-shaped stop notice (``ok: false, reason``) means the context stopped."""
        kind = frame.get("kind")
        if kind is None:
            error = frame.get("error") or {}
            return cls("stopped", reason=str(frame.get("reason") or "stopped"), message=error.get("message"))
        if kind == "complete":
            return cls("complete", output=frame.get("output"))
        if kind == "suspended":
            return cls("suspended")
        if kind == "errored":
            return cls("errored", reason=str(frame.get("reason") or "run_threw"), message=frame.get("message"))
        return cls("stopped", reason=str(frame.get("reason") or "stopped"), message=frame.get("message"))


class ExecutionContext(Protocol):
    id: str

    async def load_info(self) -> LoadInfo: ...

    async def invoke_queue(
        self, batch: QueueBatch, env: EnvSpec, host_call: HostCall | None = None
    ) -> InvokeResult: ...

    async def invoke_workflow(
        self, inv: WorkflowInvocation, env: EnvSpec, host_call: HostCall | None = None
    ) -> WorkflowOutcome:
        """Run ``new Export(env).run(event, step)`` once; the context is never reused (WF-32)."""
        ...

    async def stop(self) -> None:
        """Return only once the context's code has physically stopped."""
        ...


class Runtime(Protocol):
    async def start(self) -> None: ...

    async def start_context(
        self,
        modules: Sequence[Module],
        main_module: str,
        limits: Limits = DEFAULT_LIMITS,
        host_call: HostCall | None = None,
        share: str | None = None,
    ) -> ExecutionContext: ...

    def idle(self) -> bool:
        """No context is running in it (it may be closed without stopping anything)."""
        ...

    async def close(self) -> None: ...
