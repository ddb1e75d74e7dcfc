"""The engines' clock: epoch milliseconds, and the one loop that runs their due work.

Due times live in the logs (durable timers); this loop only decides when to look at them
again: at the next due time, at most every 0.5 s, or at once when woken by new input.
"""

import asyncio
import time
from collections.abc import Callable
from typing import NoReturn

MAX_IDLE_S = 0.5


def now_ms() -> int:
    return int(time.time() * 1000)


async def drive(step: Callable[[], int | None], wake: asyncio.Event) -> NoReturn:
    """Run `step` (which does what is due and returns the next due time, or None) forever."""
    while True:
        wake_at = step()
        timeout = MAX_IDLE_S if wake_at is None else min(MAX_IDLE_S, max(0.001, (wake_at - now_ms()) / 1000))
        try:
            await asyncio.wait_for(wake.wait(), timeout)
        except TimeoutError:
            pass
        wake.clear()
