"""The engines' clock: epoch milliseconds, and the one loop that runs their due work.

Due times live in the logs (durable timers); this loop only decides when to look at them
again: at the next due time, or at once when woken by new input; a caller that is not
woken for every change it must see also asks again every `max_idle_s`.
"""

import asyncio
import time
from collections.abc import Callable
from typing import NoReturn

MAX_IDLE_S = 0.5


def now_ms() -> int:
    return int(time.time() * 1000)


async def drive(step: Callable[[], int | None], wake: asyncio.Event, max_idle_s: float | None = MAX_IDLE_S) -> NoReturn:
    """Run `step` (which does what is due and returns the next due time, or None) forever."""
    while True:
        await woken(wake, idle_timeout(step(), now_ms(), max_idle_s))
        wake.clear()


async def woken(wake: asyncio.Event, timeout: float | None) -> bool:
    """Whether `wake` was set within `timeout` seconds (None: no limit).

    Not `asyncio.wait_for`: on Python 3.11 it drops a cancel that lands in the loop turn the
    event is set in (it returns the result instead), and a loop waiting so then runs on for
    good: an engine's teardown hung on it. `asyncio.timeout` tells its own cancel from the
    caller's."""
    try:
        async with asyncio.timeout(timeout):
            await wake.wait()
    except TimeoutError:
        return False
    return True


def idle_timeout(wake_at: int | None, now: int, max_idle_s: float | None) -> float | None:
    """Seconds to wait for a wake before stepping again; None: until woken."""
    due = None if wake_at is None else max(0.001, (wake_at - now) / 1000)
    if max_idle_s is None:
        return due
    return max_idle_s if due is None else min(max_idle_s, due)
