"""Polling the read side until a row appears (request-reply over Postgres)."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def poll(
    fetch: Callable[[], Awaitable[T | None]], timeout: float, first: float = 0.01, cap: float = 0.05
) -> T | None:
    """Call `fetch` until it returns something or `timeout` passes; None on timeout.

    Starts fast (a decision usually lands within tens of milliseconds) and backs
    off to `cap` so a slow backend is not hammered.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = first
    while True:
        found = await fetch()
        if found is not None:
            return found
        remaining = deadline - loop.time()
        if remaining <= 0:
            return None
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, cap)
