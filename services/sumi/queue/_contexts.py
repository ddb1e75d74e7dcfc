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

A context is never reused once it stopped for any reason (CPU, heap or wall
limit, a physical stop, its runtime process exiting), after a batch that did
not return normally, or once its Version has left the worker's allocation or
its Consumer is no longer live: such a context is stopped physically.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("sumi.queue")

Key = tuple[str, str]  # (Consumer UID, Version UID)


class ContextPool:
    def __init__(self, on_stopped: Callable[[], None] = lambda: None) -> None:
        self._idle: dict[Key, list[Any]] = {}
        self._stopping: dict[asyncio.Task[None], str] = {}  # stop in progress -> Consumer UID
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

    def give(self, key: Key, ctx: Any, reusable: bool, limit: int) -> None:
        """Keep the context for the next batch of `key`, or stop it."""
        idle = self._idle.setdefault(key, [])
        if reusable and ctx.stop_reason is None and len(idle) < limit:
            idle.append(ctx)
        else:
            self.stop(key[0], ctx)

    def retire(self, servable: Callable[[Key], bool]) -> None:
        """Stop every idle context whose (Consumer, Version) may no longer be served."""
        for key in [k for k in self._idle if not servable(k)]:
            for ctx in self._idle.pop(key):
                self.stop(key[0], ctx)

    def stopping(self, consumer_uid: str) -> bool:
        """Whether a context of this Consumer is still being stopped (QC-42's boundary)."""
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

    def _stopped(self, task: "asyncio.Task[None]") -> None:
        self._stopping.pop(task, None)
        self._on_stopped()


__all__ = ["ContextPool", "Key"]
