"""SIGINT, SIGTERM and SIGHUP all mean "stop": Ctrl-C, a container platform, a closed terminal.

`sumi up` turns the first of them into a `Stopped` exception in the main thread
(as Python does for Ctrl-C), so a stop interrupts start-up at any point and the
`finally` blocks undo what was started; later signals are ignored while the stop
runs, which is bounded. A `sumi serve` service cancels its main task instead and
lets its consumers and producers close.
"""

import asyncio
import os
import signal
import sys
from collections.abc import Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived (a BaseException, like KeyboardInterrupt: no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """Install before the first child starts; `wait()` blocks until a stop signal."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._task: asyncio.Task[Any] | None = None  # the main task of `run`, while it runs

    def install(self) -> "StopSignals":
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            if self._task is not None:
                # Inside an event loop an exception raised here lands in whatever callback runs
                # (a transport's write, which logs and drops it: the stop was lost, seen under
                # load). Cancel the main task instead; `run` raises Stopped once it has ended.
                self._task.get_loop().call_soon_threadsafe(self._task.cancel)
                return
            raise Stopped(signum)

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """`asyncio.run(main)`, which a stop signal cancels, raising Stopped after it has ended."""

        async def guarded() -> T:
            self._task = asyncio.current_task()
            try:
                return await main
            finally:
                self._task = None

        try:
            result = asyncio.run(guarded())
        except asyncio.CancelledError:
            if self.received is None:
                raise
        if self.received is not None:
            raise Stopped(self.received)
        return result

    def wait(self) -> None:
        while True:  # `_on_signal` raises out of here
            signal.pause()


def exit_quietly_on_stop() -> None:
    """Until a service's own handlers take over, a stop signal exits 0 at once: a platform may stop
    a service while its interpreter still imports (about a second on a loaded 2-core machine)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _exit_quietly)


def _exit_quietly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


async def run_until_stopped(main: Coroutine[Any, Any, None]) -> None:
    """Run a service's main coroutine; a stop signal cancels it (its `finally` blocks close things)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, task.cancel)
    loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
    try:
        await task
    except asyncio.CancelledError:
        if not task.cancelled():
            raise


def dump_tasks() -> None:
    """SIGUSR1: every task of the service's loop and the chain of awaits it is suspended in, on
    stderr (its log), each line marked with the process ID (services share a log). A service that
    stops making progress without failing shows here which await it hangs in."""
    tasks = asyncio.all_tasks()
    lines = [f"{len(tasks)} tasks"]
    for task in tasks:
        lines.append(f"task {task.get_name()}:")
        lines.extend(f"  {where}" for where in awaiting(task.get_coro()))
    mark = f"sumi[{os.getpid()}] "
    sys.stderr.write("".join(mark + line + "\n" for line in lines))
    sys.stderr.flush()


def awaiting(coro: Any) -> list[str]:
    """Where a suspended coroutine waits, outermost first: `Task.get_stack` gives one frame only."""
    out = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None) or getattr(coro, "ag_frame", None)
        if frame is None:
            out.append(f"on {coro!r}"[:200])
            break
        out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None) or getattr(coro, "ag_await", None)
    return out
