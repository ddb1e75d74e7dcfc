"""CPU-heavy work (checking a large document) run off the event loop, one at a time per key.

A service's event loop serves every Space; a check that takes tens of milliseconds of CPU
would hold all of them. In a thread it still holds the GIL while it runs, so each key (a
Space) gets one thread at a time: the loop then shares the interpreter with at most one
thread per busy Space, never with a burst of one Space's calls (issue 21, class 9).
"""

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class OffLoop:
    def __init__(self) -> None:
        self._turns: dict[str, asyncio.Lock] = {}

    async def run(self, key: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        turn = self._turns.setdefault(key, asyncio.Lock())
        try:
            async with turn:
                return await asyncio.to_thread(fn, *args, **kwargs)
        finally:
            if not turn.locked() and self._turns.get(key) is turn:
                del self._turns[key]  # no one of that key waits: nothing to keep
