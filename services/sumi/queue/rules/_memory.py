"""What the queue engine's state may hold in RAM: a window of settled IDs, a budget of bodies.

Pure and deterministic: both are decided by the order of the records folded, so a rebuild
from the log holds the same IDs (docs/decisions.md, "The queue engine's memory is bounded").
"""

from collections import deque
from dataclasses import dataclass, field


@dataclass
class SettledWindow:
    """The most recent `size` settled message IDs of one queue, in settlement order.

    A re-sent append of a message still in the window is ignored; one settled longer ago is
    forgotten (its re-send is a new delivery: at least once, QC-24). A deque beside a set:
    popping the oldest of an insertion-ordered dict degrades as its deleted slots pile up."""

    size: int
    order: deque[str] = field(default_factory=deque)
    ids: set[str] = field(default_factory=set)

    def __contains__(self, mid: str) -> bool:
        return mid in self.ids

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, mid: str) -> None:
        if mid in self.ids or self.size <= 0:
            return
        self.order.append(mid)
        self.ids.add(mid)
        while len(self.order) > self.size:
            self.ids.discard(self.order.popleft())


@dataclass
class BodyBudget:
    """The bytes of message bodies the engine's state holds, against a limit.

    A body past the limit stays in the log only, read back by offset when its batch is
    delivered. A body the engine read back is held while its batch is open, beyond the
    limit if need be (bounded by the open batches), since a dead letter copies it."""

    limit: int
    held: int = 0

    def admit(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def take(self, size: int) -> None:
        self.held += size

    def release(self, size: int) -> None:
        self.held -= size
