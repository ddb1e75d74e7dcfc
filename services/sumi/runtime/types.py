"""Shared shapes of the worker runtime: what the Host hands a runtime and what it gets back.

Both runtimes (``javascript`` in a Node.js process, ``python`` in child
processes) implement :class:`Runtime` and :class:`ExecutionContext`.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

StopReason = Literal["threw", "cpu_limit", "heap_limit", "wall_limit", "stopped"]

# async def host_call(context_id, method, args) -> value; raise HostError to reject.
HostCall = Callable[[str, str, dict[str, Any]], Awaitable[Any]]


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

    def to_wire(self) -> dict[str, Any]:
        return {"vars": dict(self.vars), "queueBindings": list(self.queue_bindings)}


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


class ExecutionContext(Protocol):
    id: str

    async def load_info(self) -> LoadInfo: ...

    async def invoke_queue(
        self, batch: QueueBatch, env: EnvSpec, host_call: HostCall | None = None
    ) -> InvokeResult: ...

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
    ) -> ExecutionContext: ...

    async def close(self) -> None: ...
