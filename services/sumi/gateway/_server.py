"""uvicorn without its 100 ms tick: an idle gateway wakes once a second, not ten times (issue 40).

uvicorn's main loop sleeps 0.1 s between looks at `should_exit`, set by its signal handler, so
an idle gateway woke ten times a second to find nothing. Here the handler also wakes the loop,
which otherwise sleeps until the next second's `Date` header is due (what `on_tick` does on
every tenth count).
"""

import asyncio
import contextlib
from types import FrameType

import uvicorn

TICK_S = 1.0  # the Date header's resolution
_TICKS_PER_S = 10  # uvicorn's on_tick refreshes the Date header when its count is a multiple of this


class Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_S)
            counter = (counter + _TICKS_PER_S) % 864000

    def stop(self) -> None:
        """End serving, as a stop signal does (any thread)."""
        self.should_exit = True
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        self.stop()
