"""How many writes of one kind the gateway lets the Host work on at once, learnt from how long they
take (issue 41). Pure: the caller passes the clock.

A write in flight is work the Host has accepted and not answered: its command waits in the
engines' partitions, in the read side, in the broker. Past the Host's capacity those waits grow
without bound, every request in them is answered late or never, and the work done for requests
whose clients gave up is lost: goodput falls. So a gateway admits a write only while its writes
in flight are under a limit, and moves the limit by what the answers took, as TCP moves its
window (slow growth, fast shrinking): while a window's answers come within
`target` and the limit was reached, it grows by a tenth; when their median is over `target`, it
shrinks to what the answers' rate carries in `target` (Little's law), at most once per answer's
time. It starts at its largest: a Host that answers in time never refuses. Each
gateway learns its own limit from its own answers, so N gateways share a Host's capacity without
talking to each other.

One Space's flood must not shut another's trickle out: a Space is refused once it holds its
share of the limit (the limit divided among the Spaces with writes in flight), and a Space under
its share is admitted even when the others hold the whole limit, so the overshoot is at most one
share. A refusal names when to come back: the writes in flight divided by the rate at which
answers have been coming, at least one second.
"""

import math
from collections import Counter
from dataclasses import dataclass

WINDOW_S = 0.25  # how often the limit moves
DECREASE = 0.8
INCREASE = 0.1
# Never below: a burst this size is let in however slow the last answers were (a Host starting a
# runtime answers its first writes slowly, and is not overloaded for it).
MIN_LIMIT = 32
MAX_LIMIT = 512
MAX_RETRY_AFTER_S = 30


@dataclass(frozen=True)
class Refusal:
    retry_after: int  # seconds
    detail: str


class WriteLimit:
    def __init__(self, target: float, start: int = MAX_LIMIT, lo: int = MIN_LIMIT, hi: int = MAX_LIMIT) -> None:
        self.target = target
        self.limit = float(start)
        self.lo, self.hi = lo, hi
        self.in_flight = 0
        self.by_space: Counter[str] = Counter()
        self._took: list[float] = []  # this window's answers, seconds each
        self._sent: Counter[str] = Counter()  # writes asked per Space, halved every window
        self._window_start: float | None = None
        self._reached = False  # the limit held a request back, or was full, this window
        self._rate = 0.0  # answers per second, smoothed over windows
        self._hold_until = 0.0  # no shrinking again before this

    def admit(self, space: str, now: float) -> Refusal | None:
        """None and the write is counted in flight (`done` must follow), or why not."""
        self._tick(now)
        held = self.by_space[space]
        if self.in_flight >= self.limit:
            self._reached = True
            share = self.limit / (len(self.by_space) + (held == 0))
            if held >= share:
                why = (
                    f"this Space holds its share ({int(share)}) of the writes the Host answers in time"
                    if held < self.in_flight
                    else f"the Host holds the {int(self.limit)} writes it answers in time"
                )
                return Refusal(self._retry_after(), f"{why}; retry later with the same Idempotency-Key")
        self.in_flight += 1
        self.by_space[space] += 1
        return None

    def refuse_busiest(self, space: str, why: str, now: float) -> Refusal | None:
        """A refusal for `space` if it sends at least an even share of the writes lately (a bound
        other than the limit is reached: the Spaces sending most give way first). Sent, not
        admitted: a flood refused for a while still sends the most, and a trickle never does."""
        self._tick(now)
        self._sent[space] += 1
        sent = self._sent[space]
        if sent < 2 or sent * len(self._sent) < sum(self._sent.values()):  # a first ask lately: let in
            return None
        return Refusal(self._retry_after(), f"{why}; retry later with the same Idempotency-Key")

    def done(self, space: str, took: float, now: float) -> None:
        """A write admitted for `space` was answered after `took` seconds."""
        self.in_flight -= 1
        self.by_space[space] -= 1
        if self.by_space[space] <= 0:
            del self.by_space[space]
        self._tick(now)  # first: this answer belongs to the window it ends in, not to the last one
        self._took.append(took)

    def _tick(self, now: float) -> None:
        if self._window_start is None:
            self._window_start = now
            return
        elapsed = now - self._window_start
        if elapsed < WINDOW_S:
            return
        rate = len(self._took) / elapsed
        self._rate = rate if self._rate == 0 else 0.5 * self._rate + 0.5 * rate
        if self._took:
            took = sorted(self._took)
            median = took[len(took) // 2]
            if median > self.target:
                if now >= self._hold_until:
                    # Little's law: at the rate answers come, `target` s of answers is this many
                    # writes in flight. Once, then held for as long as an answer takes: the
                    # answers until then were admitted under the old limit and say nothing of
                    # the new one (shrinking on each of them would overshoot far below).
                    self.limit = max(self.lo, min(self.limit * DECREASE, self._rate * self.target))
                    self._hold_until = now + median
            elif self._reached:
                self.limit = min(self.hi, self.limit + max(1.0, self.limit * INCREASE))
        self._took, self._reached, self._window_start = [], False, now
        self._sent = Counter({space: n / 2 for space, n in self._sent.items() if n >= 1})

    def _retry_after(self) -> int:
        if self._rate <= 0:
            return 1
        return max(1, min(MAX_RETRY_AFTER_S, math.ceil(self.in_flight / self._rate)))
