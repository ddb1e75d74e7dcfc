"""The write limit (issue 41): it learns from the answers' times how many writes the Host
takes in time, refuses past that with when to come back, and keeps one Space's flood from
shutting another's trickle out."""

from sumi.gateway._limits import MAX_LIMIT, MIN_LIMIT, WINDOW_S, WriteLimit


def answered(limit: WriteLimit, space: str, n: int, took: float, now: float) -> float:
    """Up to n writes of `space` admitted at `now` and answered, `took` s each, evenly over the
    next window (as a Host answers: one after another)."""
    admitted = sum(limit.admit(space, now) is None for _ in range(n))
    for i in range(admitted):
        limit.done(space, took, now + WINDOW_S * (i + 1) / admitted)
    return now + WINDOW_S


def test_a_host_that_answers_in_time_is_never_refused() -> None:
    # WF-27: backend_unavailable only when the Host cannot take the write in time.
    limit, now = WriteLimit(target=1.0), 0.0
    for _ in range(20):
        now = answered(limit, "a", 100, 0.05, now)
    assert limit.limit == MAX_LIMIT
    assert all(limit.admit("a", now) is None for _ in range(MAX_LIMIT))


def test_slow_answers_shrink_the_limit_and_fast_ones_grow_it_back() -> None:
    # WF-27: past capacity a write is refused at once, with Retry-After from the backlog.
    limit, now = WriteLimit(target=1.0, lo=4), 0.0
    for _ in range(30):
        now = answered(limit, "a", 10, 3.0, now)  # 40/s, each 3 s: at most 40 are answered in 1 s
    assert limit.limit <= 40
    refusals = [limit.admit("a", now) for _ in range(60)]
    assert sum(r is None for r in refusals) == limit.in_flight <= 40
    refused = [r for r in refusals if r is not None]
    assert refused and all(r.retry_after >= 1 for r in refused)
    for _ in range(limit.in_flight):
        limit.done("a", 0.01, now)
    before = limit.limit
    for _ in range(10):  # fast again, and the limit is reached: it grows
        now = answered(limit, "a", int(limit.limit), 0.01, now)
    assert limit.limit > before


def test_retry_after_is_the_backlog_over_the_rate_of_answers() -> None:
    # WF-27: the client is told when the writes ahead of it will have been answered.
    limit, now = WriteLimit(target=0.5, start=8, lo=4), 0.0
    for _ in range(4):  # 8 answers a window of 0.25 s: 32/s, each too slow
        now = answered(limit, "a", 8, 2.0, now)
    for _ in range(int(limit.limit) + 1):
        limit.admit("a", now)
    refusal = limit.admit("a", now)
    assert refusal is not None
    assert refusal.retry_after == 1  # a handful in flight at 32/s: under a second, said as one


def test_a_space_under_its_share_is_admitted_while_a_flood_fills_the_limit() -> None:
    # WF-27: one Space's flood is refused before another Space's trickle.
    limit, now = WriteLimit(target=1.0, start=10, lo=4), 0.0
    admitted = sum(limit.admit("flood", now) is None for _ in range(50))
    assert admitted == 10
    assert limit.admit("trickle", now) is None  # under its share: let in past the limit
    assert limit.admit("trickle", now) is None
    assert limit.admit("flood", now) is not None  # over its share: refused
    for _ in range(4):  # a third Space: a third of the limit, 3.3
        assert limit.admit("other", now) is None
    assert limit.admit("other", now) is not None


def test_the_limit_never_falls_below_its_floor() -> None:
    # WF-27: a burst of writes on a slow Host is let in; only a backlog is refused.
    limit, now = WriteLimit(target=0.1), 0.0
    for _ in range(100):
        now = answered(limit, "a", 40, 5.0, now)
    assert limit.limit == MIN_LIMIT
    assert sum(limit.admit("a", now) is None for _ in range(MIN_LIMIT)) == MIN_LIMIT


def test_the_limit_shrinks_to_what_the_answers_carry_once_per_answers_time() -> None:
    # WF-27: past capacity the limit goes to the writes answered in `target` at the rate answers
    # come, and is not cut again by answers admitted under the old limit (no collapse of goodput).
    limit, now = WriteLimit(target=1.0), 0.0
    for _ in range(2):  # 40 in a quarter second: 160/s, each 2 s
        now = answered(limit, "a", 40, 2.0, now)
    assert 150 <= limit.limit <= 160
    shrunk = limit.limit
    for _ in range(6):  # within the next 2 s: the answers still come from the old limit
        now = answered(limit, "a", 40, 2.0, now)
    assert limit.limit == shrunk
    for _ in range(3):
        now = answered(limit, "a", 40, 2.0, now)
    assert limit.limit < shrunk


def test_past_another_bound_the_spaces_sending_most_give_way_first() -> None:
    # WF-27: a backlog past its bound refuses the flood's creates, not the trickle's, however
    # long the flood has been refused.
    limit, now = WriteLimit(target=1.0), 0.0
    refused = {"flood": 0, "trickle": 0}
    for tick in range(400):  # 10 s: the flood asks 40 times a window, the trickle once
        now = tick * WINDOW_S / 40
        refused["flood"] += limit.refuse_busiest("flood", "busy", now) is not None
        if tick % 40 == 0:
            refused["trickle"] += limit.refuse_busiest("trickle", "busy", now) is not None
    assert refused == {"flood": 399, "trickle": 0}  # the flood's first ask let in
    refusal = limit.refuse_busiest("flood", "busy", now)
    assert refusal is not None and refusal.retry_after >= 1 and refusal.detail.startswith("busy")
    alone = WriteLimit(target=1.0)
    assert alone.refuse_busiest("alone", "busy", 0.0) is None  # its first ask lately
    assert alone.refuse_busiest("alone", "busy", 0.0) is not None  # one Space sending: it gives way
