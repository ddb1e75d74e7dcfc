"""Restart backoff (issue 20 item 0): exponential, capped, and forgiving after a long run."""

from hypothesis import given
from hypothesis import strategies as st

from sumi.core.backoff import CAP, FIRST, STABLE, Backoff, delay


def test_a_series_of_failures_waits_twice_as_long_each_time_up_to_the_cap() -> None:
    # QC-43: a dependency that stays down is retried for ever, never in a tight loop.
    backoff = Backoff()
    waits = [backoff.after_failure(ran_for=0.1) for _ in range(10)]
    assert waits[:5] == [FIRST, 2 * FIRST, 4 * FIRST, 8 * FIRST, 16 * FIRST]
    assert waits[-1] == CAP and waits == sorted(waits)


def test_a_failure_after_a_long_run_starts_the_series_again() -> None:
    # QC-43: one crash a day is restarted at once, not after yesterday's backoff.
    backoff = Backoff()
    for _ in range(6):
        backoff.after_failure(ran_for=0.1)
    assert backoff.after_failure(ran_for=STABLE) == FIRST


@given(st.integers(min_value=0, max_value=10_000))
def test_no_wait_is_shorter_than_the_first_or_longer_than_the_cap(failures: int) -> None:
    # QC-43
    assert FIRST <= delay(failures) <= CAP
