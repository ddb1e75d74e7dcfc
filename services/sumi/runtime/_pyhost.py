"""Supervisor of the ``python`` runtime: one child process per context.

Python worker code is trusted code: the child process is a boundary for
state, limits and stopping, not a sandbox (see ``_pychild``).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from ._channel import EXITED, Channel
from ._pyabi import EXIT_HEAP_LIMIT, PACKAGE
from .types import (
    DEFAULT_LIMITS,
    EnvSpec,
    HostCall,
    InvokeResult,
    Limits,
    LoadInfo,
    Module,
    QueueBatch,
    WorkflowInvocation,
    WorkflowOutcome,
)

log = logging.getLogger("sumi.runtime.python")
CHILD_ARGV = [sys.executable, "-m", "sumi.runtime._pychild"]


def exit_reason(returncode: int | None) -> str:
    if returncode in (-signal.SIGPROF, -signal.SIGXCPU):
        return "cpu_limit"
    if returncode == EXIT_HEAP_LIMIT:
        return "heap_limit"
    return "stopped"


def write_package(root: Path, modules: Sequence[Module]) -> None:
    """Lay the Version's modules out as one importable package under root."""
    package = root / PACKAGE
    package.mkdir()
    for module in modules:
        rel = PurePosixPath(module.name)
        if rel.is_absolute() or ".." in rel.parts or rel.suffix != ".py":
            raise ValueError(f"module name {module.name!r} must be a relative .py path")
        path = package.joinpath(*rel.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(module.content, encoding="utf-8")
    (package / "__init__.py").touch()


class PyContext:
    def __init__(
        self,
        channel: Channel,
        context_id: str,
        root: Path,
        limits: Limits,
        host_call: HostCall | None,
        forget: Callable[[PyContext], None],
    ) -> None:
        self.id = context_id
        self._forget = forget
        self.host_call = host_call
        self.host_tasks: set[asyncio.Task[None]] = set()
        self.stop_reason: str | None = None
        self._forced_reason: str | None = None
        self._channel = channel
        self._root = root
        self._limits = limits

    def on_stopped(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = self._forced_reason or reason
        for task in list(self.host_tasks):
            task.cancel()
        shutil.rmtree(self._root, ignore_errors=True)
        self._forget(self)

    async def load_info(self) -> LoadInfo:
        reply = await self._channel.request({"op": "load_info", "contextId": self.id})
        if reply is EXITED:
            return LoadInfo(load_error=f"context stopped: {self.stop_reason or 'stopped'}")
        return LoadInfo.from_wire(reply)

    async def _invoke(self, frame: dict[str, Any], host_call: HostCall | None) -> dict[str, Any] | None:
        """One invocation under the wall limit; None when the context is (or got) stopped."""
        if host_call is not None:
            self.host_call = host_call
        if self.stop_reason is not None:
            return None
        wall = self._limits.wall_ms / 1000 if self._limits.wall_ms else None
        try:
            reply = await asyncio.wait_for(self._channel.request({**frame, "contextId": self.id}), wall)
        except TimeoutError:
            self._forced_reason = "wall_limit"
            await self.stop()
            return None
        return None if reply is EXITED else reply

    async def invoke_queue(self, batch: QueueBatch, env: EnvSpec, host_call: HostCall | None = None) -> InvokeResult:
        reply = await self._invoke({"op": "invoke_queue", "batch": batch.to_wire(), "env": env.to_wire()}, host_call)
        if reply is None:
            reason = self.stop_reason or "stopped"
            return InvokeResult.stopped(reason, f"context stopped: {reason}")  # type: ignore[arg-type]
        return InvokeResult.from_wire(reply)

    async def invoke_workflow(
        self, inv: WorkflowInvocation, env: EnvSpec, host_call: HostCall | None = None
    ) -> WorkflowOutcome:
        frame = {"op": "invoke_workflow", "invocation": inv.to_wire(), "env": env.to_wire()}
        reply = await self._invoke(frame, host_call)
        if reply is None:
            reason = self.stop_reason or "stopped"
            return WorkflowOutcome("stopped", reason=reason, message=f"context stopped: {reason}")
        return WorkflowOutcome.from_wire(reply)

    async def stop(self) -> None:
        """SIGKILL the child and return once it has been reaped."""
        self._forced_reason = self._forced_reason or "stopped"
        await self._channel.close()
        self.on_stopped("stopped")


class PyRuntime:
    """The ``python`` runtime."""

    def __init__(self, python: str | None = None) -> None:
        self._argv = [python, *CHILD_ARGV[1:]] if python else CHILD_ARGV
        self._contexts: set[PyContext] = set()

    async def start(self) -> None:
        return None  # nothing shared: each context is its own process

    async def start_context(
        self,
        modules: Sequence[Module],
        main_module: str,
        limits: Limits = DEFAULT_LIMITS,
        host_call: HostCall | None = None,
    ) -> PyContext:
        root = Path(tempfile.mkdtemp(prefix="sumi-py-"))
        try:
            write_package(root, modules)
        except ValueError:
            shutil.rmtree(root, ignore_errors=True)
            raise
        context_id = uuid.uuid4().hex
        channel = Channel(
            self._argv, log, exit_reason=exit_reason, label=context_id, stderr_level=logging.INFO, cwd=str(root)
        )
        ctx = PyContext(channel, context_id, root, limits, host_call, self._contexts.discard)
        await channel.start()
        channel.contexts[context_id] = ctx
        self._contexts.add(ctx)
        reply = await channel.request(
            {
                "op": "start_context",
                "contextId": context_id,
                "root": str(root),
                "mainModule": main_module,
                "limits": limits.to_wire(),
            }
        )
        if reply is EXITED and ctx.stop_reason is None:
            await ctx.stop()
        return ctx

    async def close(self) -> None:
        contexts, self._contexts = self._contexts, set()
        await asyncio.gather(*(ctx.stop() for ctx in contexts))
