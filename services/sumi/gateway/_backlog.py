"""The workflow instances waiting for a context, as the read model counts them: the backlog a
create would join (issue 41).

An answered create is not the end of its work: its ten steps come after it. When instances
are created faster than the engines run them, the instances wait `queued` for a context, and
every answer (creates included) slows only once that backlog is already long; the write limit
(`_limits`), which learns from answers, learns it late. So creates are also refused while the
Host holds QUEUED_MAX instances queued. The count is the projection's (`workflow_counts`,
kept by a trigger), read every READ_EVERY_S while creates come and not at all when none did for
IDLE_AFTER_S: an idle gateway reads nothing.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("sumi.gateway")

READ_EVERY_S = 0.25
IDLE_AFTER_S = 2.0


class Backlog:
    def __init__(self, queued_max: int, count: Callable[[], Awaitable[int]]) -> None:
        self.queued_max = queued_max
        self.queued = 0
        self._count = count
        self._last_create = 0.0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None

    def full(self) -> bool:
        """Whether a create now would join a backlog past the bound; notes the create."""
        self._last_create = time.monotonic()
        self._wake.set()
        return self.queued >= self.queued_max

    def start(self) -> None:
        self._task = asyncio.create_task(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _follow(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while time.monotonic() - self._last_create < IDLE_AFTER_S:
                try:
                    self.queued = await self._count()
                except Exception as exc:  # the read side down: no backlog known, the limit still holds
                    log.debug("backlog not read: %r", exc)
                    self.queued = 0
                await asyncio.sleep(READ_EVERY_S)
            self.queued = 0  # not read while idle: the next create is let in, and reading starts again
