"""Supervisor of the JavaScript runtime: one Node.js process, many contexts.

Each context is a vm context in a worker thread of that process: alone in its
thread, or beside contexts of the same Version (see ``js/host.mjs``). If the
process dies, every context it held reports stopped and the next
``start_context`` runs in a fresh process. The process runs behind the OS
walls of ``_walls`` (once per process, not per context), on a staged copy of
``js/``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _walls
from ._channel import EXITED, Channel
from .types import (
    DEFAULT_LIMITS,
    STOP_REASONS,
    EnvSpec,
    HostCall,
    InvokeResult,
    Limits,
    LoadInfo,
    LogSink,
    Module,
    QueueBatch,
    WorkflowInvocation,
    WorkflowOutcome,
)

JS_DIR = Path(__file__).resolve().parent / "js"
log = logging.getLogger("sumi.runtime.js")
_STOPPED = STOP_REASONS - {"threw"}  # the reasons that mean the context is gone


def node_argv(node: str = "node", js_dir: Path = JS_DIR) -> list[str]:
    return [
        node,
        "--experimental-permission",
        f"--allow-fs-read={js_dir}",
        "--allow-worker",
        "--experimental-vm-modules",
        "--no-warnings",
        str(js_dir / "host.mjs"),
    ]


class RuntimeUnavailable(RuntimeError):
    pass


class JsContext:
    def __init__(self, runtime: JsRuntime, channel: Channel, context_id: str, host_call: HostCall | None) -> None:
        self.id = context_id
        self.host_call = host_call
        self.host_tasks: set[asyncio.Task[None]] = set()
        self.log_sink: LogSink | None = None  # set by the engine that invokes it, with its tags
        self.stop_reason: str | None = None
        self.violation: str | None = None
        self._runtime = runtime
        self._channel = channel

    def on_stopped(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        for task in list(self.host_tasks):
            task.cancel()  # its reply could no longer reach any code

    def violated(self, reason: str) -> None:
        self.violation = reason
        task = asyncio.get_running_loop().create_task(self.stop())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # failure is logged by stop()'s caller

    async def load_info(self) -> LoadInfo:
        reply = await self._channel.request({"op": "load_info", "contextId": self.id})
        if reply is EXITED or reply.get("op") == "error":
            return LoadInfo(load_error=f"context stopped: {self.stop_reason or 'stopped'}")
        return LoadInfo.from_wire(reply)

    async def invoke_queue(self, batch: QueueBatch, env: EnvSpec, host_call: HostCall | None = None) -> InvokeResult:
        if host_call is not None:
            self.host_call = host_call
        if self.stop_reason is not None:
            return InvokeResult.stopped()
        reply = await self._channel.request(
            {
                "op": "invoke_queue",
                "contextId": self.id,
                "batch": batch.to_wire(),
                "env": env.to_wire(),
            }
        )
        if reply is EXITED:
            return InvokeResult.stopped(message="runtime process exited")
        if reply.get("op") == "error":
            return InvokeResult.stopped(message=f"context stopped: {reply['error']['message']}")
        if self.violation is not None and not reply.get("ok"):
            return InvokeResult.stopped(message=f"context stopped: it broke the runtime protocol ({self.violation})")
        result = InvokeResult.from_wire(reply)
        if result.reason in _STOPPED:
            # The context_stopped frame follows this reply; whoever decides on reusing the
            # context right after the result must already see that it is gone.
            self.on_stopped(result.reason)
        return result

    async def invoke_workflow(
        self, inv: WorkflowInvocation, env: EnvSpec, host_call: HostCall | None = None
    ) -> WorkflowOutcome:
        if host_call is not None:
            self.host_call = host_call
        if self.stop_reason is not None:
            return WorkflowOutcome("stopped", reason=self.stop_reason)
        reply = await self._channel.request(
            {"op": "invoke_workflow", "contextId": self.id, "invocation": inv.to_wire(), "env": env.to_wire()}
        )
        if reply is EXITED:
            return WorkflowOutcome("stopped", reason="stopped", message="runtime process exited")
        if reply.get("op") == "error":
            error = reply.get("error") or {}
            return WorkflowOutcome("stopped", reason="threw", message=str(error.get("message")))
        outcome = WorkflowOutcome.from_wire(reply)
        if outcome.kind == "stopped" and outcome.reason in _STOPPED:
            self.on_stopped(str(outcome.reason))
        return outcome

    async def stop(self) -> None:
        if self._channel.alive and self.id in self._channel.contexts:
            reply = await self._channel.request({"op": "stop_context", "contextId": self.id})
            if reply.get("op") not in ("stopped", EXITED["op"]):
                raise RuntimeUnavailable(f"stop of context {self.id} not confirmed: {reply}")
        # Either the runtime confirmed the worker thread exited, or the whole
        # process is gone: in both cases no code of this context runs any more.
        self._channel.forget(self.id)
        self.on_stopped("stopped")


class JsRuntime:
    """The ``javascript`` runtime."""

    def __init__(
        self,
        node: str | None = None,
        *,
        walls: str = "",
        memory_mb: int = 4096,
        test_hooks: bool = False,
    ) -> None:
        # `walls` and `memory_mb` are the operator's settings (runtime_walls, runtime_memory_mb),
        # handed down by whoever read them.
        self._node = os.path.realpath(node or shutil.which("node") or "node")
        self.wall = _walls.choose(walls, memory_mb)
        # Test only: lets a test run code in the runtime process itself, as an
        # escape from the vm would, to show what the walls leave it.
        self._env = {"SUMI_JS_TEST_HOOKS": "1"} if test_hooks else {}
        self._staged: Path | None = None
        self._channel: Channel | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    def _argv(self) -> tuple[list[str], Path]:
        if self._staged is None:
            self._staged = _walls.stage_once("sumi-js-", {"js": sorted(JS_DIR.glob("*.*js"))}) / "js"
        js_dir = self._staged
        ro = [str(js_dir)] + ([] if self._node.startswith("/usr/") else [str(Path(self._node).parent.parent)])
        inner = node_argv(self._node, js_dir)
        return self.wall.argv(inner, ro=ro, env=self._env, chdir=str(js_dir)), js_dir

    async def start(self) -> None:
        async with self._lock:
            await self._ensure_channel()

    async def _ensure_channel(self) -> Channel:
        if self._closed:
            raise RuntimeUnavailable("runtime is closed")
        if self._channel is None or not self._channel.alive:
            argv, js_dir = self._argv()
            channel = Channel(
                argv,
                log,
                on_exit=self._on_exit,
                cwd=str(js_dir),
                env=self.wall.env(self._env),
                preexec_fn=self.wall.preexec(),
                launcher=self.wall.kind != "none",
                **_walls.user(),
            )
            await channel.start()
            self._channel = channel
        return self._channel

    def _on_exit(self, channel: Channel) -> None:
        log.warning(
            "javascript runtime process exited (code %s); restarting", channel.proc.returncode if channel.proc else None
        )
        if not self._closed:
            asyncio.get_running_loop().create_task(self.start())

    async def start_context(
        self,
        modules: Sequence[Module],
        main_module: str,
        limits: Limits = DEFAULT_LIMITS,
        host_call: HostCall | None = None,
        share: str | None = None,
    ) -> JsContext:
        """A fresh context. With `share` (a Version's ID), it may run in a worker thread
        beside other contexts of the same `share`; without it, in a thread of its own."""
        async with self._lock:
            channel = await self._ensure_channel()
        ctx = JsContext(self, channel, uuid.uuid4().hex, host_call)
        channel.contexts[ctx.id] = ctx
        reply: dict[str, Any] = await channel.request(
            {
                "op": "start_context",
                "contextId": ctx.id,
                "mainModule": main_module,
                "modules": [{"name": m.name, "content": m.content} for m in modules],
                "limits": limits.to_wire(),
                **({"share": share} if share else {}),
            }
        )
        if reply is EXITED or reply.get("op") == "error":
            channel.contexts.pop(ctx.id, None)
            raise RuntimeUnavailable(f"context did not start: {reply}")
        return ctx

    def idle(self) -> bool:
        return self._channel is None or not self._channel.contexts

    def alive(self) -> tuple[int, list[int]]:
        """Its contexts running now, and the pids of its processes (for metrics)."""
        channel = self._channel
        if channel is None or not channel.alive:
            return 0, []
        pid = channel.sandboxed_pid
        return len(channel.contexts), [pid] if pid else []

    async def close(self) -> None:
        self._closed = True
        if self._channel is not None:
            await self._channel.close()

    @property
    def pid(self) -> int | None:
        """The runtime process itself (inside its walls)."""
        return self._channel.sandboxed_pid if self._channel is not None else None

    async def debug_eval(self, code: str) -> Any:
        """Test only (``test_hooks=True``): run ``code`` as an async function body in
        the runtime process's main thread and return its JSON result."""
        channel = await self._ensure_channel()
        reply = await channel.request({"op": "debug_eval", "code": code})
        return reply.get("value")
