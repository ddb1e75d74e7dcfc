"""Shared capacity divided fairly among Spaces: `total` slots, at most `per_space` to one Space.

A Space that asks for more than its share waits for its own slots to free, never for
another Space's; when a slot frees and several Spaces wait, the one that was served
longest ago goes next (round robin), so a Space with a thousand waiters and one with a
single waiter alternate. Used wherever one process serves every Space with a bounded
resource: the verifier's loads (`FairSlots`), the workflow engine's live contexts
(`admit`); docs/security.md, "Spaces cannot starve each other".

A waiter cancelled while queued leaves the queue; a slot handed to a waiter whose task
was cancelled at that moment is released again, so no slot is ever lost.
"""

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Mapping, Sequence


class FairSlots:
    def __init__(self, total: int, per_space: int) -> None:
        if total < 1 or per_space < 1:
            raise ValueError("slots must be at least 1")
        self.total = total
        self.per_space = min(per_space, total)
        self.held: dict[str, int] = {}
        # Spaces with waiters, least recently served first; each with its waiters in order.
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    def in_use(self) -> int:
        return sum(self.held.values())

    @contextlib.asynccontextmanager
    async def slot(self, space: str) -> AsyncIterator[None]:
        await self.acquire(space)
        try:
            yield
        finally:
            self.release(space)

    async def acquire(self, space: str) -> None:
        if space not in self._waiting and self._free_for(space):  # nobody of its own ahead
            self._take(space)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(space, deque()).append(fut)
        self._hand_out()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as we were cancelled: give it back
                self.release(space)
            else:
                self._forget(space, fut)
            raise

    def release(self, space: str) -> None:
        left = self.held[space] - 1
        if left:
            self.held[space] = left
        else:
            del self.held[space]
        self._hand_out()

    def _free_for(self, space: str) -> bool:
        return self.in_use() < self.total and self.held.get(space, 0) < self.per_space

    def _take(self, space: str) -> None:
        self.held[space] = self.held.get(space, 0) + 1

    def _hand_out(self) -> None:
        """Grant free slots to waiting Spaces in round-robin order."""
        progress = True
        while progress and self.in_use() < self.total:
            progress = False
            for space in list(self._waiting):
                if not self._free_for(space):
                    continue
                queue = self._waiting.pop(space)
                fut = queue.popleft()
                if queue:
                    self._waiting[space] = queue  # to the back: served most recently
                self._take(space)
                fut.set_result(None)
                progress = True
                break

    def _forget(self, space: str, fut: "asyncio.Future[None]") -> None:
        queue = self._waiting.get(space)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(fut)
        if not queue:
            del self._waiting[space]


def admit(waiting: Mapping[str, Sequence[str]], held: Mapping[str, int], free: int, per_space: int) -> list[str]:
    """Which waiting items to start now: at most `free` in all, no Space past `per_space` held,
    taken one per Space in turn (the Spaces in `waiting`'s order, each Space's items in
    theirs), so a Space with a thousand waiting items and one with one both start now."""
    queues = {s: deque(items) for s, items in waiting.items() if items}
    room = {s: per_space - held.get(s, 0) for s in queues}
    chosen: list[str] = []
    while len(chosen) < free:
        turn = [s for s, q in queues.items() if q and room[s] > 0]
        if not turn:
            break
        for space in turn[: free - len(chosen)]:
            chosen.append(queues[space].popleft())
            room[space] -= 1
    return chosen
