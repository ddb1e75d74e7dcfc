"""Exponential backoff for restarts: the pure part, shared by the supervisor and the projections.

A part that keeps failing is retried at 0.5 s, 1 s, 2 s, ... up to 30 s apart, so a
dead dependency costs a line now and then, not a traceback a second; one that ran
for a while before it failed starts again from the shortest delay.
"""

from dataclasses import dataclass

FIRST = 0.5
CAP = 30.0
STABLE = 60.0  # seconds up after which a failure is news again, not one more of a series


def delay(failures: int, first: float = FIRST, cap: float = CAP) -> float:
    """The wait before the restart that follows `failures` failures in a row (0: the first)."""
    return min(cap, first * float(2 ** min(failures, 32)))


@dataclass
class Backoff:
    first: float = FIRST
    cap: float = CAP
    stable: float = STABLE
    failures: int = 0

    def after_failure(self, ran_for: float) -> float:
        """The wait before the next start, given how long the failed run lasted."""
        if ran_for >= self.stable:
            self.failures = 0
        wait = delay(self.failures, self.first, self.cap)
        self.failures += 1
        return wait
