"""Supervisor of the ``python`` runtime: one child process per context.

Python worker code owns its child process (there is no language sandbox), so
the child runs behind the OS walls of ``_walls``: empty environment, own
network namespace, user 65534, read-only view of only the interpreter, the
runtime's own code and the Version's modules, memory cap. Where those walls
cannot be had (no bubblewrap), Python workers are refused unless the operator
sets ``SUMI_ALLOW_UNWALLED_PYTHON=1`` (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import rfc8785

from . import _walls
from ._channel import EXITED, Channel
from ._cpu import CpuMeter, capped, life_s, tree_cpu
from ._jshost import RuntimeUnavailable
from ._pyabi import EXIT_HEAP_LIMIT, PACKAGE
from .types import (
    DEFAULT_LIMITS,
    EnvSpec,
    HostCall,
    HostError,
    InvokeResult,
    Limits,
    LoadInfo,
    LogSink,
    Module,
    QueueBatch,
    WorkflowInvocation,
    WorkflowOutcome,
)

log = logging.getLogger("sumi.runtime.python")
RUNTIME_DIR = Path(__file__).resolve().parent
SANDBOX_CODE = "/opt/sumi"  # where the staged runtime code appears inside the walls
SANDBOX_VERSION = "/version"  # where the Version's modules appear inside the walls
CHILD_OVERHEAD_MB = 256  # interpreter and runtime, on top of the heap limit, under the wall's memory cap


def exit_reason(returncode: int | None) -> str:
    # A launcher (bwrap, unshare) reports a child killed by signal N as 128+N.
    if returncode in (-signal.SIGPROF, -signal.SIGXCPU, 128 + signal.SIGPROF, 128 + signal.SIGXCPU):
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
    """One child process. Its CPU and wall budgets are kept here, in the Host: each runs from an
    invocation's start, or from the Host's answer that completes a workflow step, to the next
    such start (docs/decisions.md), and the CPU is that of all its processes (``_cpu``)."""

    def __init__(
        self,
        channel: Channel,
        context_id: str,
        root: Path,
        limits: Limits,
        host_call: HostCall | None,
        forget: Callable[[PyContext], None],
        meter: CpuMeter,
    ) -> None:
        self.id = context_id
        self._forget = forget
        self._host = host_call
        self.host_call: HostCall | None = self._call  # what the channel calls: _call, metered
        self.host_tasks: set[asyncio.Task[None]] = set()
        self.log_sink: LogSink | None = None  # set by the engine that invokes it, with its tags
        self.stop_reason: str | None = None
        self._forced_reason: str | None = None
        self._channel = channel
        self._root = root
        self._limits = limits
        self._meter = meter
        self._wall_deadline = 0.0
        self._steps: set[str] = set()  # step names completed for this execution

    def start_budget(self) -> None:
        """CPU and wall from now on count against a fresh budget."""
        self._wall_deadline = asyncio.get_running_loop().time() + self._limits.wall_ms / 1000
        if self._channel.proc is not None and self.stop_reason is None:
            self._meter.start(self, self._channel.proc.pid, self._limits.cpu_ms, self._over_cpu)

    def _over_cpu(self) -> None:
        self._forced_reason = self._forced_reason or "cpu_limit"
        asyncio.get_running_loop().create_task(self.stop())

    async def _call(self, context_id: str, method: str, args: dict[str, Any]) -> Any:
        if self._host is None:
            raise HostError("unsupported", f"no host handler for {method}")
        value = await self._host(context_id, method, args)
        if method.startswith("step.") and self._completes(args.get("name"), value):
            self.start_budget()
        return value

    def _completes(self, name: Any, value: Any) -> bool:
        # Only the first answer that completes a name is a step the Host recorded (at most
        # WF-38's count of them); a completed name can be asked again, for nothing.
        action = value.get("action") if isinstance(value, dict) else None
        if action not in ("resolve", "reject") or not isinstance(name, str) or name in self._steps:
            return False
        self._steps.add(name)
        return True

    def _worn(self) -> bool:
        """Less than a budget left of the hard limit on its life: the next batch could die of it."""
        proc = self._channel.proc
        return proc is not None and tree_cpu(proc.pid) > life_s(self._limits.cpu_ms) - self._limits.cpu_ms / 1000

    def on_stopped(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = self._forced_reason or reason
        self._meter.forget(self)
        for task in list(self.host_tasks):
            task.cancel()
        shutil.rmtree(self._root, ignore_errors=True)
        self._forget(self)

    def violated(self, reason: str) -> None:
        log.warning("python context %s stopped: it broke the runtime protocol (%s)", self.id, reason)
        asyncio.get_running_loop().create_task(self.stop())

    @property
    def sandboxed_pid(self) -> int | None:
        return self._channel.sandboxed_pid if self._channel.alive else None

    async def load_info(self) -> LoadInfo:
        reply = await self._channel.request({"op": "load_info", "contextId": self.id})
        if reply is EXITED:
            return LoadInfo(load_error=f"context stopped: {self.stop_reason or 'stopped'}")
        return LoadInfo.from_wire(reply)

    async def _invoke(self, frame: dict[str, Any], host_call: HostCall | None) -> dict[str, Any] | None:
        """One invocation under the limits; None when the context is (or got) stopped."""
        if host_call is not None:
            self._host = host_call
        if self.stop_reason is not None:
            return None
        self.start_budget()
        request = asyncio.ensure_future(self._channel.request({**frame, "contextId": self.id}))
        try:
            while not await self._within_wall(request):
                if asyncio.get_running_loop().time() >= self._wall_deadline:
                    self._forced_reason = self._forced_reason or "wall_limit"
                    await self.stop()
                    break
        finally:
            request.cancel()
        reply = request.result() if request.done() and not request.cancelled() else EXITED
        return None if reply is EXITED else reply

    async def _within_wall(self, request: asyncio.Future[dict[str, Any]]) -> bool:
        """Whether the request ended before the wall budget's deadline (which a step may move)."""
        if not self._limits.wall_ms:
            await asyncio.wait({request})
        else:
            await asyncio.wait({request}, timeout=max(self._wall_deadline - asyncio.get_running_loop().time(), 0))
        return request.done()

    async def invoke_queue(self, batch: QueueBatch, env: EnvSpec, host_call: HostCall | None = None) -> InvokeResult:
        reply = await self._invoke({"op": "invoke_queue", "batch": batch.to_wire(), "env": env.to_wire()}, host_call)
        if reply is not None and self._worn():
            await self.stop()  # its result stands; it is not reused
        if reply is None:
            reason = self.stop_reason or "stopped"
            return InvokeResult.stopped(reason, f"context stopped: {reason}")  # type: ignore[arg-type]
        return InvokeResult.from_wire(reply)

    async def invoke_workflow(
        self, inv: WorkflowInvocation, env: EnvSpec, host_call: HostCall | None = None
    ) -> WorkflowOutcome:
        frame = {"op": "invoke_workflow", "invocation": inv.to_wire(), "env": env.to_wire()}
        self._steps = set(inv.completed)
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

    def __init__(self, python: str | None = None, *, walls: str = "", allow_unwalled: bool = False) -> None:
        # `walls` and `allow_unwalled` are the operator's settings (runtime_walls,
        # allow_unwalled_python), handed down by whoever read them: the defaults are the strict ones.
        self.wall = _walls.choose(walls, 0)
        self._allow_unwalled = allow_unwalled
        self._python, self._python_ro = (python, []) if python else _walls.python_for_sandbox()
        self._staged: Path | None = None
        self._contexts: set[PyContext] = set()
        self._meter = CpuMeter()

    async def start(self) -> None:
        return None  # nothing shared: each context is its own process

    def _code(self) -> Path:
        """The runtime's own modules, staged once, as the namespace package ``sumi.runtime``."""
        if self._staged is None:
            # Beside the runtime: the one canonical form (sumi.core.canonical) and the one library
            # it imports, rfc8785 (pure Python).
            self._staged = _walls.stage_once(
                "sumi-pyrt-",
                {
                    "sumi/runtime": sorted(RUNTIME_DIR.glob("*.py")),
                    "sumi/runtime/rules": sorted((RUNTIME_DIR / "rules").glob("*.py")),
                    "sumi/core": [RUNTIME_DIR.parent / "core" / "canonical.py"],
                    "rfc8785": sorted(Path(rfc8785.__file__).parent.glob("*.py")),
                },
            )
        return self._staged

    def _channel(self, context_id: str, root: Path, limits: Limits) -> tuple[Channel, str]:
        """The child's channel behind the wall, and where it finds the Version's modules."""
        if not self.wall.hides_files and not self._allow_unwalled:
            raise RuntimeUnavailable(
                f"python workers need the OS walls (bubblewrap); this Host has {self.wall.kind!r}. "
                "Install bubblewrap, or set SUMI_ALLOW_UNWALLED_PYTHON=1 to run them without (docs/security.md)"
            )
        code = self._code()
        wall = _walls.Wall(self.wall.kind, limits.heap_mb + CHILD_OVERHEAD_MB)
        inside_code = wall.path(str(code), SANDBOX_CODE)
        inside_root = wall.path(str(root), SANDBOX_VERSION)
        env = {"PYTHONPATH": inside_code, "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8"}
        argv = wall.argv(
            [self._python, "-s", "-m", "sumi.runtime._pychild"],
            ro=self._python_ro,
            binds={str(code): SANDBOX_CODE, str(root): SANDBOX_VERSION},
            env=env,
            chdir=inside_root,
        )
        _walls.give_to_sandbox(root)
        channel = Channel(
            argv,
            log,
            exit_reason=exit_reason,
            label=context_id,
            stderr_level=logging.INFO,
            cwd=str(root),
            env=wall.env(env),
            preexec_fn=capped(wall.preexec(), limits.cpu_ms),
            launcher=wall.kind != "none",
            **_walls.user(),
        )
        return channel, inside_root

    async def start_context(
        self,
        modules: Sequence[Module],
        main_module: str,
        limits: Limits = DEFAULT_LIMITS,
        host_call: HostCall | None = None,
        share: str | None = None,  # a child process per context: nothing is shared
    ) -> PyContext:
        root = Path(tempfile.mkdtemp(prefix="sumi-py-"))
        context_id = uuid.uuid4().hex
        try:
            write_package(root, modules)
            channel, inside_root = self._channel(context_id, root, limits)
        except (ValueError, RuntimeUnavailable):
            shutil.rmtree(root, ignore_errors=True)
            raise
        ctx = PyContext(channel, context_id, root, limits, host_call, self._contexts.discard, self._meter)
        await channel.start()
        channel.contexts[context_id] = ctx
        self._contexts.add(ctx)
        ctx.start_budget()  # the Version's top level runs at the start
        reply = await channel.request(
            {
                "op": "start_context",
                "contextId": context_id,
                "root": inside_root,
                "mainModule": main_module,
                "limits": limits.to_wire(),
            }
        )
        if reply is EXITED and ctx.stop_reason is None:
            await ctx.stop()
        return ctx

    def idle(self) -> bool:
        return not self._contexts

    def alive(self) -> tuple[int, list[int]]:
        """Its contexts running now, and the pids of their processes (for metrics)."""
        return len(self._contexts), [pid for ctx in self._contexts if (pid := ctx.sandboxed_pid) is not None]

    async def close(self) -> None:
        contexts, self._contexts = self._contexts, set()
        await asyncio.gather(*(ctx.stop() for ctx in contexts))
