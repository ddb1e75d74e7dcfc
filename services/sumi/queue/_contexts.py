"""Warm execution contexts for queue batches.

Starting a context (a Node.js worker thread with its vm context and linked
modules, or a Python child process) costs tens of milliseconds of CPU: more
than a small handler spends on a whole batch of 100 messages. So, the way
Workers runtimes run queue handlers (one isolate serves many invocations), the
engine keeps up to maxConcurrency idle contexts per (Consumer, Version) and
hands the next batch of that pair one of them. Each batch still picks its
Version by percentage (`pick_version`); only a context of that Version serves it.

This is for queue batches only. Workflow contexts never come through here:
their rule that no state survives between contexts (WF-32) is untouched.

A batch that finds no idle context takes the first that comes: one another batch of its
pair hands back, or one of the starts in progress. A new start begins only when every start
in progress is already promised to an earlier batch. A start takes up to seconds on a loaded
machine and a batch a few milliseconds, so a burst that raises the concurrency no longer waits
for starts it does not need. A start in progress counts as a context of its Consumer (QC-42:
module code runs while it starts), and a failed one fails the batch it was promised to.

A context is never reused once it stopped for any reason (CPU, heap or wall
limit, a physical stop, its runtime process exiting), after a batch that did
not return normally, or once its Version has left the worker's allocation or
its Consumer is no longer live: such a context is stopped physically.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("sumi.queue")

Key = tuple[str, str]  # (Consumer UID, Version UID)


class ContextPool:
    def __init__(self, on_stopped: Callable[[], None] = lambda: None) -> None:
        self._idle: dict[Key, list[Any]] = {}
        self._waiting: dict[Key, list[asyncio.Future[Any]]] = {}  # batches promised the next context
        self._starts: dict[Key, int] = {}  # starts in progress
        self._stopping: dict[asyncio.Future[Any], str] = {}  # stop or start in progress -> Consumer UID
        self._on_stopped = on_stopped
        # Consumers with a context whose stop the runtime did not confirm (QC-42: such a
        # boundary is unproven until the runtime process itself is gone).
        self.unconfirmed: set[str] = set()

    def take(self, key: Key) -> Any | None:
        """An idle, still running context of this (Consumer, Version), or None."""
        idle = self._idle.get(key)
        while idle:
            ctx = idle.pop()
            if ctx.stop_reason is None:
                return ctx
            # It died while idle (its runtime process exited): nothing left to stop.
        return None

    def acquire(
        self, key: Key, start: Callable[[], Awaitable[Any]], servable: Callable[[], bool], limit: int
    ) -> "asyncio.Future[Any]":
        """A context for a batch of `key`: an idle one at once, else the first to come."""
        got: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        ctx = self.take(key)
        if ctx is not None:
            got.set_result(ctx)
            return got
        waiting = self._waiting.setdefault(key, [])
        waiting.append(got)
        if self._starts.get(key, 0) < len(waiting):
            self._start(key, start, servable, limit)
        return got

    def release(self, key: Key, got: "asyncio.Future[Any]", limit: int) -> None:
        """The batch no longer waits (it ended first): a context promised to it goes to the next."""
        waiting = self._waiting.get(key, [])
        if got in waiting:
            waiting.remove(got)
        if got.done() and not got.cancelled() and got.exception() is None:
            self.give(key, got.result(), reusable=True, limit=limit)
        else:
            got.cancel()

    def _start(self, key: Key, start: Callable[[], Awaitable[Any]], servable: Callable[[], bool], limit: int) -> None:
        self._starts[key] = self._starts.get(key, 0) + 1
        task = asyncio.ensure_future(start())
        self._stopping[task] = key[0]

        def started(task: "asyncio.Future[Any]") -> None:
            self._stopping.pop(task, None)
            self._starts[key] -= 1
            failed = RuntimeError("the context start was cancelled") if task.cancelled() else task.exception()
            if failed is not None:
                self._promise(key, failed=failed)
            elif not self._promise(key, ctx=task.result()):
                self.give(key, task.result(), servable(), limit)
            self._on_stopped()

        task.add_done_callback(started)

    def _promise(self, key: Key, ctx: Any = None, failed: BaseException | None = None) -> bool:
        """Hand a context (or a start's failure) to the first batch waiting: whether one was."""
        waiting = self._waiting.get(key, [])
        while waiting:
            got = waiting.pop(0)
            if got.done():
                continue
            if failed is not None:
                got.set_exception(failed)
            else:
                got.set_result(ctx)
            return True
        return False

    def give(self, key: Key, ctx: Any, reusable: bool, limit: int) -> None:
        """Hand the context to a batch waiting for one, keep it for the next, or stop it."""
        usable = reusable and ctx.stop_reason is None
        if usable and self._promise(key, ctx=ctx):
            return
        idle = self._idle.setdefault(key, [])
        if usable and len(idle) < limit:
            idle.append(ctx)
        else:
            self.stop(key[0], ctx)

    def retire(self, servable: Callable[[Key], bool]) -> None:
        """Stop every idle context whose (Consumer, Version) may no longer be served."""
        for key in [k for k in self._idle if not servable(k)]:
            for ctx in self._idle.pop(key):
                self.stop(key[0], ctx)

    def stopping(self, consumer_uid: str) -> bool:
        """Whether a context of this Consumer is still being stopped or started (QC-42's boundary)."""
        return consumer_uid in self._stopping.values()

    def idle(self, key: Key) -> int:
        return len(self._idle.get(key, ()))

    def stop(self, consumer_uid: str, ctx: Any) -> None:
        task = asyncio.ensure_future(self._stop(consumer_uid, ctx))
        self._stopping[task] = consumer_uid
        task.add_done_callback(self._stopped)

    async def _stop(self, consumer_uid: str, ctx: Any) -> None:
        try:
            await ctx.stop()
        except Exception:  # the runtime did not confirm the stop: the code may still run
            log.exception("stopping idle context %s", getattr(ctx, "id", "?"))
            self.unconfirmed.add(consumer_uid)

    def _stopped(self, task: "asyncio.Future[None]") -> None:
        self._stopping.pop(task, None)
        self._on_stopped()


__all__ = ["ContextPool", "Key"]
