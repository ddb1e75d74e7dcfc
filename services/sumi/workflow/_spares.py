"""Fresh execution contexts started ahead of need, each used for exactly one execution.

Starting a context costs 1-2 ms in a JavaScript worker thread already running for its
Version (the runtime's cells), tens of milliseconds when a thread must start, and more for a
Python child process; it is paid by every instance start, every wake and, in always-replay
mode, every step. A spare is started before it is needed and handed to
one execution only, then stopped with it: it has run nothing before (module evaluation
is part of every context's start), so WF-32's fresh objects, closures and module state
hold exactly as for a context started on demand. Spares are kept only for Versions that
ran an execution lately, and only a few per Version (`Settings.workflow_spare_contexts`).
"""

import asyncio
import logging
from typing import Any, Protocol

from sumi.control.rules.state import VersionView
from sumi.core.config import Settings
from sumi.runtime import Limits, Module
from sumi.runtime.types import Runtime

log = logging.getLogger("sumi.workflow")


class Starter(Protocol):
    """What spares need of the engine: its runtimes, and whether it is going down (so this
    module never imports the engine)."""

    settings: Settings
    closing: bool

    async def runtime(self, kind: str, space: str = "") -> Runtime: ...


class Spares:
    def __init__(self, engine: Starter, per_version: int | None = None) -> None:
        self.engine = engine
        self.per_version = engine.settings.workflow_spare_contexts if per_version is None else per_version
        self._ready: dict[str, list[Any]] = {}
        self._starting: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def take(self, code: VersionView) -> Any | None:
        """A spare of this Version that is still running (or None), and a new one started behind it."""
        ready = self._ready.get(code.uid, [])
        ctx = None
        while ready and ctx is None:
            candidate = ready.pop()
            ctx = candidate if getattr(candidate, "stop_reason", None) is None else None
        self.refill(code)
        return ctx

    def refill(self, code: VersionView) -> None:
        have = len(self._ready.get(code.uid, ())) + self._starting.get(code.uid, 0)
        for _ in range(0 if self.engine.closing else self.per_version - have):
            self._starting[code.uid] = self._starting.get(code.uid, 0) + 1
            task = asyncio.ensure_future(self._start(code))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start(self, code: VersionView) -> None:
        try:
            rt = await self.engine.runtime(code.runtime, code.space)
            modules = [Module(n, c) for n, c in code.modules]
            limits = Limits(cpu_ms=self.engine.settings.runtime_cpu_ms)
            ctx = await rt.start_context(modules, code.main_module, limits, share=code.uid)
        except Exception as exc:  # no spare then: executions start their own
            log.warning("starting a spare context of %s: %r", code.uid, exc)
            return
        finally:
            self._starting[code.uid] -= 1
        if self.engine.closing:
            await ctx.stop()
            return
        self._ready.setdefault(code.uid, []).append(ctx)

    def retire(self, keep: set[str]) -> None:
        """Stop the spares of every Version no Workflow runs on any more."""
        for uid in [u for u in self._ready if u not in keep]:
            for ctx in self._ready.pop(uid):
                asyncio.ensure_future(ctx.stop())

    def forget(self) -> None:
        """The runtimes went away, and every spare with them."""
        self._ready.clear()

    async def close(self) -> None:
        """No spare starts any more; the ready ones are stopped (the engine is going down)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        spares = [ctx for ready in self._ready.values() for ctx in ready]
        self._ready.clear()
        await asyncio.gather(*(ctx.stop() for ctx in spares), return_exceptions=True)
