"""One worker runtime per kind (javascript, python) for an engine: started once, restarted on demand.

Runs that start at the same moment ask for the runtime of their kind together; the
first ask starts it and every ask awaits that same start (one shared future per
kind), so no second runtime process is ever started beside the first. A start that
failed is tried again at the next ask. `restart` drops the runtimes (the next ask
starts fresh ones) and closes the old ones, a starting one once it has started: a
stop the runtime did not confirm is proven the only certain way, by its process
exiting (QC-42, WF-14). `close` does the same at shutdown and refuses later asks.
"""

import asyncio
from collections.abc import Awaitable, Callable

from sumi.runtime import JsRuntime, PyRuntime
from sumi.runtime.types import Runtime


async def start_runtime(kind: str) -> Runtime:
    rt: Runtime = JsRuntime() if kind == "javascript" else PyRuntime()
    await rt.start()
    return rt


class Runtimes:
    def __init__(self, start: Callable[[str], Awaitable[Runtime]] = start_runtime) -> None:
        self._start = start
        self._runtimes: dict[str, asyncio.Future[Runtime]] = {}  # kind -> its (starting) runtime
        self.closed = False

    async def get(self, kind: str) -> Runtime:
        """The runtime of a kind, started once however many ask at the same time."""
        if self.closed:
            raise RuntimeError("the runtimes are closed")
        starting = self._runtimes.get(kind)
        if starting is None or _failed(starting):
            starting = self._runtimes[kind] = asyncio.ensure_future(self._start(kind))
        # shielded: one asker cancelled (its run stopped) does not cancel the start the others await
        return await asyncio.shield(starting)

    async def restart(self) -> None:
        """Close every runtime (each returns once its process has exited); the next ask starts anew."""
        starting, self._runtimes = list(self._runtimes.values()), {}
        for fut in starting:
            try:
                rt = await fut
            except BaseException:  # never started: nothing runs
                continue
            await rt.close()

    async def close(self) -> None:
        self.closed = True
        await self.restart()


def _failed(fut: "asyncio.Future[Runtime]") -> bool:
    return fut.done() and (fut.cancelled() or fut.exception() is not None)
