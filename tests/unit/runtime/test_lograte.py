"""The per-context bound on what a worker prints, and what an invocation's end tells its log."""

from hypothesis import given
from hypothesis import strategies as st

from sumi.runtime._lograte import BURST, RATE_PER_S, LogBucket, drop_notice, outcome_line


def test_a_burst_then_the_rate() -> None:
    # QC-6: a context printing in a loop gets its burst, then its rate; the rest is counted
    bucket = LogBucket()
    admitted = sum(bucket.admit(0.0) for _ in range(BURST + 1000))
    assert admitted == BURST and bucket.dropped == 1000
    admitted = sum(bucket.admit(2.0) for _ in range(1000))  # two seconds later
    assert admitted == 2 * RATE_PER_S
    assert bucket.take_dropped() == 1000 + 1000 - 2 * RATE_PER_S and bucket.take_dropped() == 0


@given(st.lists(st.floats(min_value=0, max_value=0.05), max_size=2000))
def test_every_line_is_admitted_or_counted(gaps: list[float]) -> None:
    # QC-6: nothing vanishes uncounted, and nothing passes beyond burst + rate x time
    bucket, now, admitted = LogBucket(), 0.0, 0
    for gap in gaps:
        now += gap
        admitted += bucket.admit(now)
    assert admitted + bucket.dropped == len(gaps)
    assert admitted <= BURST + RATE_PER_S * now + 1


def test_what_an_invocation_end_tells() -> None:
    # QC-32, WF-45: an uncaught error is logged; a normal return says nothing
    error = {"name": "TypeError", "message": "x is not a function"}
    assert outcome_line("invoke_queue", {"ok": False, "reason": "threw", "error": error}) == (
        "uncaught TypeError: x is not a function"
    )
    assert outcome_line("invoke_queue", {"ok": False, "reason": "cpu_limit", "error": error}).startswith(
        "stopped: cpu_limit"
    )
    assert outcome_line("invoke_queue", {"ok": True}) is None
    assert outcome_line("invoke_workflow", {"kind": "complete"}) is None
    # The message is instance data, purged with the instance (WF-13): the log names the end only.
    assert outcome_line("invoke_workflow", {"kind": "errored", "reason": "run_threw", "message": "Error: no"}) == (
        "run_threw (the message is in the instance's history)"
    )
    assert drop_notice(1).startswith("1 log line dropped")
