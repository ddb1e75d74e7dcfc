"""One worker runtime per kind (javascript, python) and Space for an engine: started once,
restarted on demand, closed when idle.

Each Space gets runtimes of its own, so the JavaScript contexts of two Spaces never share
a process: code that escaped its `vm` and its thread still sits behind the process's OS
walls, alone with its own Space's contexts (docs/security.md). A runtime with no context
left, unused for `idle_s`, is closed at a later ask.

Runs that start at the same moment ask for the runtime of their kind and Space together;
the first ask starts it and every ask awaits that same start (one shared future per
kind and Space), so no second runtime process is ever started beside the first. A start that
failed is tried again at the next ask. `restart` drops the runtimes (the next ask
starts fresh ones) and closes the old ones, a starting one once it has started: a
stop the runtime did not confirm is proven the only certain way, by its process
exiting (QC-42, WF-14). `close` does the same at shutdown and refuses later asks.
"""

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable

from sumi.core.config import Settings
from sumi.runtime import JsRuntime, PyRuntime
from sumi.runtime.types import Runtime

log = logging.getLogger("sumi.runtime")
IDLE_S = 300.0


async def start_runtime(kind: str, settings: Settings) -> Runtime:
    rt: Runtime = (
        JsRuntime(walls=settings.runtime_walls, memory_mb=settings.runtime_memory_mb)
        if kind == "javascript"
        else PyRuntime(walls=settings.runtime_walls, allow_unwalled=settings.allow_unwalled_python)
    )
    await rt.start()
    return rt


class Runtimes:
    def __init__(
        self,
        settings: Settings | None = None,
        start: Callable[[str], Awaitable[Runtime]] | None = None,
        idle_s: float = IDLE_S,
    ) -> None:
        """`settings` for the runtimes this starts; `start` instead of them (tests)."""
        if start is None:
            assert settings is not None, "Runtimes needs the settings its runtimes start with"
            start = functools.partial(start_runtime, settings=settings)
        self._start = start
        self.idle_s = idle_s
        self._runtimes: dict[tuple[str, str], asyncio.Future[Runtime]] = {}  # (kind, Space) -> its (starting) runtime
        self._used: dict[tuple[str, str], float] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._reaped = 0.0
        self.closed = False

    async def get(self, kind: str, space: str = "") -> Runtime:
        """The runtime of a kind for a Space, started once however many ask at the same time."""
        if self.closed:
            raise RuntimeError("the runtimes are closed")
        key = (kind, space)
        starting = self._runtimes.get(key)
        if starting is None or _failed(starting):
            starting = self._runtimes[key] = asyncio.ensure_future(self._start(kind))
        now = asyncio.get_running_loop().time()
        self._used[key] = now
        self._reap(now)
        # shielded: one asker cancelled (its run stopped) does not cancel the start the others await
        return await asyncio.shield(starting)

    def _reap(self, now: float) -> None:
        """Close the runtimes that hold no context and were not asked for in `idle_s`. Every context
        start asks, so the runtimes are looked over at most ten times per `idle_s`, not at every ask."""
        if now - self._reaped < self.idle_s / 10:
            return
        self._reaped = now
        for key, fut in list(self._runtimes.items()):
            if now - self._used.get(key, now) < self.idle_s or not fut.done() or _failed(fut):
                continue
            rt = fut.result()
            if not rt.idle():
                continue
            del self._runtimes[key]
            self._used.pop(key, None)
            task = asyncio.ensure_future(self._close_one(key, rt))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_one(key: tuple[str, str], rt: Runtime) -> None:
        with contextlib.suppress(Exception):
            await rt.close()
        log.info("closed the idle %s runtime of space %s", *key)

    async def restart(self, only: tuple[str, str] | None = None) -> None:
        """Close every runtime, or `only` the one of that (kind, Space), each returning once its
        process has exited; the next ask starts anew."""
        if only is not None:
            fut = self._runtimes.pop(only, None)
            self._used.pop(only, None)
            starting = [] if fut is None else [fut]
        else:
            starting, self._runtimes = list(self._runtimes.values()), {}
            self._used.clear()
            if self._closing:
                await asyncio.gather(*self._closing, return_exceptions=True)
        for fut in starting:
            try:
                rt = await fut
            except BaseException:  # never started: nothing runs
                continue
            await rt.close()

    async def close(self) -> None:
        self.closed = True
        await self.restart()

    def alive(self) -> dict[tuple[str, str], tuple[int, list[int]]]:
        """Per (kind, Space) of the started runtimes: contexts running, and process ids."""
        out = {}
        for key, fut in self._runtimes.items():
            if fut.done() and not _failed(fut) and (alive := getattr(fut.result(), "alive", None)) is not None:
                out[key] = alive()
        return out


def _failed(fut: "asyncio.Future[Runtime]") -> bool:
    return fut.done() and (fut.cancelled() or fut.exception() is not None)
