"""The queue engine's bounded memory (issue 17): a window of settled IDs per queue and a budget
of held bodies, in the pure state and decisions. No broker, no database."""

import itertools
import random

import pytest

from sumi.core import records as r
from sumi.queue.rules import _decide as d
from sumi.queue.rules._memory import BodyBudget, SettledWindow
from sumi.queue.rules._state import EngineState, evolve
from sumi.wire.topics import Location
from tests.unit.queue.test_engine_core import T0, consumer, new_id


class Log:
    """An engine state and the log it was folded from, each record at its own offset (partition 0)."""

    def __init__(self, window: int = 100, budget: int = 1 << 20) -> None:
        self.state = EngineState(settled_window=window, bodies=BodyBudget(budget))
        self.window, self.budget = window, budget
        self.records: list[tuple[r.Record, Location]] = []
        self.offsets = itertools.count()

    def apply(self, records: list[r.Record]) -> list[r.Record]:
        for rec in records:
            at = (0, next(self.offsets))
            self.records.append((rec, at))
            evolve(self.state, rec, at)
        return records

    def send(self, *bodies: bytes, queue: str = "q") -> list[str]:
        ids = [new_id("msg") for _ in bodies]
        self.apply([r.MessageAccepted(queue, "demo", mid, body, T0, T0) for mid, body in zip(ids, bodies, strict=True)])
        return ids

    def rebuilt(self) -> EngineState:
        fresh = EngineState(settled_window=self.window, bodies=BodyBudget(self.budget))
        for rec, at in self.records:
            evolve(fresh, rec, at)
        return fresh

    def settle_all(self) -> None:
        c = consumer(max_batch_size=1000)
        while (out := d.deliver(self.state, c, lambda seed: "v1", T0, new_id)).batch is not None:
            self.apply(out.records)
            self.apply(d.end_batch(self.state, c, out.batch.batchId, "returned", T0, new_id))


def test_the_window_forgets_the_oldest_first() -> None:
    # QC-24: past the window a settled ID is forgotten, so only a re-send older than it is new
    w = SettledWindow(3)
    for mid in ["a", "b", "c", "d"]:
        w.add(mid)
    assert "a" not in w and all(mid in w for mid in "bcd") and len(w) == 3
    w.add("b")  # already there: its place is its first settlement's
    w.add("e")
    assert "b" not in w and list(w.order) == ["c", "d", "e"]


def test_a_window_of_zero_remembers_nothing() -> None:
    # QC-24: a re-send is then always a new delivery (at least once)
    w = SettledWindow(0)
    w.add("a")
    assert "a" not in w and len(w) == 0


def test_a_resent_append_within_the_window_is_ignored() -> None:
    # QC-24, QC-26: a message settled within the window is not delivered again by a re-sent append
    log = Log(window=2)
    [mid] = log.send(b"first")
    log.settle_all()
    log.apply([r.MessageAccepted("q", "demo", mid, b"again", T0, T0)])
    assert not log.state.queue("q").messages


def test_a_resent_append_older_than_the_window_is_a_new_delivery() -> None:
    # QC-24, QC-45: the window bounds dedupe; an older re-send is delivered again (at least once)
    log = Log(window=2)
    first, *later = log.send(b"1", b"2", b"3")
    log.settle_all()
    assert first not in log.state.queue("q").settled and all(mid in log.state.queue("q").settled for mid in later)
    log.apply([r.MessageAccepted("q", "demo", first, b"1", T0, T0)])
    assert list(log.state.queue("q").messages) == [first]


def test_a_resent_message_is_in_its_batch_once_whatever_its_first_life_left_in_the_indexes() -> None:
    # QC-21, QC-24: a batch holds a message once; the heaps' stale entries of its first life
    # (left until the next look) never stand for the new one
    log, c = Log(window=0), consumer()
    [mid] = log.send(b"1")
    out = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
    assert out.batch is not None
    log.apply(out.records)
    log.apply(d.end_batch(log.state, c, out.batch.batchId, "returned", T0, new_id))
    log.apply([r.MessageAccepted("q", "demo", mid, b"1", T0, T0)])  # before the engine looks again
    again = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
    assert again.batch is not None and again.batch.messageIds == (mid,)


def test_the_window_is_per_queue() -> None:
    # QC-24: one busy queue does not push another queue's settled IDs out
    log = Log(window=1)
    [kept] = log.send(b"x", queue="p")
    log.apply([r.MessagesAcknowledged("p", "bat_0", (kept,), "returned", T0)])
    log.apply([r.MessagesAcknowledged("q", "bat_1", (mid,), "returned", T0) for mid in log.send(b"y", b"z")])
    assert kept in log.state.queue("p").settled and len(log.state.queue("q").settled) == 1


def test_a_rebuild_from_the_same_records_holds_the_same_window() -> None:
    # QC-43, QC-24: the window is decided by the log's order alone, so a restart dedupes the same
    rng = random.Random(17)
    log = Log(window=7)
    c = consumer(max_batch_size=4, max_retries=1, retry_delay_s=0, dead_letter_queue="dlq")
    for _ in range(40):
        log.send(*(b"m" * rng.randrange(1, 9) for _ in range(rng.randrange(1, 4))))
        out = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
        log.apply(out.records)
        if out.batch is not None:
            outcome = rng.choice(["returned", "threw", "abandoned"])
            log.apply(d.end_batch(log.state, c, out.batch.batchId, outcome, T0, new_id))
    fresh = log.rebuilt()
    for uid in ("q", "dlq"):
        assert list(fresh.queue(uid).settled.order) == list(log.state.queue(uid).settled.order)
    assert len(log.state.queue("q").settled) == 7  # the window was filled and moved on


def test_the_budget_admits_rejects_and_releases() -> None:
    # QC-22: bodies up to the budget are held; a body past it is not, however small the rest
    b = BodyBudget(10)
    assert b.admit(6) and not b.admit(5) and b.admit(4) and b.held == 10
    b.release(6)
    assert b.admit(5) and b.held == 9
    b.take(7)  # a body read back is held past the budget (its open batch bounds it)
    assert b.held == 16 and not b.admit(1)


def test_a_message_past_the_budget_keeps_only_its_location() -> None:
    # QC-22: its body stays in the log, and where it lies there is all the state keeps
    log = Log(budget=8)
    held, past = log.send(b"12345", b"678901")
    q = log.state.queue("q")
    assert q.messages[held].body == b"12345" and q.messages[held].at == (0, 0)
    assert q.messages[past].body is None and q.messages[past].at == (0, 1)
    assert log.state.bodies.held == 5


def test_the_budget_is_shared_by_every_queue_and_freed_by_settlement() -> None:
    # QC-22, QC-31: one engine's bound, not one per queue; a settled body leaves the state
    log = Log(budget=8)
    log.send(b"1234", queue="p")
    [past] = log.send(b"56789")
    assert log.state.queue("q").messages[past].body is None
    log.settle_all()  # queue q only
    log.apply([r.MessagesAcknowledged("p", "bat_0", tuple(log.state.queue("p").messages), "returned", T0)])
    assert log.state.bodies.held == 0
    [now_held] = log.send(b"56789")
    assert log.state.queue("q").messages[now_held].body == b"56789"


def test_a_body_read_back_is_held_while_in_flight_and_let_go_when_pending_again() -> None:
    # QC-24, QC-27: a redelivery reads it back again rather than holding it past the budget
    log = Log(budget=4)
    log.send(b"1234")
    [mid] = log.send(b"5678")
    c = consumer(max_retries=3, retry_delay_s=0)
    q = log.state.queue("q")
    out = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
    assert out.batch is not None and out.unread == ()
    log.apply(out.records)
    q.hold(mid, b"5678")
    assert q.messages[mid].body == b"5678" and log.state.bodies.held == 8
    log.apply(d.end_batch(log.state, c, out.batch.batchId, "threw", T0, new_id))
    # Pending again, bodies are let go in the order their retries fold until the budget holds.
    assert log.state.bodies.held == 4 and [m.body is None for m in q.messages.values()] == [True, False]


@pytest.mark.parametrize("dlq", [None, "dlq"])
def test_an_exhausted_message_waits_for_its_body_only_for_a_dead_letter(dlq: str | None) -> None:
    # QC-33, QC-34: a dead letter copies the original bytes, so it is decided with the body held
    log = Log(budget=0)
    [mid] = log.send(b"body")
    c = consumer(max_retries=0, retry_delay_s=0, dead_letter_queue=dlq)
    first = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
    assert first.batch is not None
    log.apply(first.records)
    log.state.queue("q").hold(mid, b"body")
    log.apply(d.end_batch(log.state, c, first.batch.batchId, "abandoned", T0, new_id))  # owed again, body let go
    out = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
    if dlq is None:
        assert out.unread == () and out.records == [r.MessageDiscarded("q", mid, "retries_exhausted", T0)]
        return
    assert out.unread == (mid,) and out.records == [] and out.batch is None
    log.state.queue("q").hold(mid, b"body")
    out = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
    moved, accepted = out.records
    assert isinstance(moved, r.MessageDeadLettered) and isinstance(accepted, r.MessageAccepted)
    assert accepted.body == b"body" and accepted.queueUid == "dlq"


def test_a_failed_read_back_leaves_an_exhausted_message_owed_not_lost() -> None:
    # QC-24, QC-34: a batch whose bodies could not be read ends threw; the message waits for its body
    log = Log(budget=0)
    [mid] = log.send(b"body")
    c = consumer(max_retries=0, retry_delay_s=30, dead_letter_queue="dlq")
    out = d.deliver(log.state, c, lambda seed: "v1", T0, new_id)
    assert out.batch is not None
    log.apply(out.records)
    ended = log.apply(d.end_batch(log.state, c, out.batch.batchId, "threw", T0, new_id))
    assert [type(x) for x in ended] == [r.MessageRetryScheduled, r.BatchEnded]
    assert ended[0].visibleAt == T0  # at once: the next delivery reads the body and dead-letters it
    assert d.deliver(log.state, c, lambda seed: "v1", T0, new_id).unread == (mid,)


def test_a_dead_letter_folded_when_decided_is_let_go_once_the_log_gives_its_place() -> None:
    # QC-34: the engine's own appends are folded before they commit; the budget holds them too
    log = Log(budget=0)
    state = log.state
    evolve(state, r.MessageAccepted("dlq", "demo", "msg_dead", b"copied", T0, T0))  # as the engine emits it
    m = state.queue("dlq").messages["msg_dead"]
    assert m.body == b"copied" and m.at is None  # nowhere to read it from yet
    evolve(state, r.MessageAccepted("dlq", "demo", "msg_dead", b"copied", T0, T0), (2, 41))  # read off the log
    assert m.body is None and m.at == (2, 41) and state.bodies.held == 0


def test_a_purge_gives_back_the_bodies_it_drops() -> None:
    # QC-22: a purged queue's bodies do not stay counted against the budget
    log = Log(budget=100)
    log.send(b"x" * 30, b"y" * 30)
    log.apply(d.purge(log.state, "q", T0))
    assert log.state.bodies.held == 0


def test_a_rebuild_decides_the_same_records_whichever_bodies_it_holds() -> None:
    # QC-43: which bodies are held may differ after a restart; what is decided may not
    log = Log(budget=3)
    log.send(b"aa", b"bbb", b"c")
    c = consumer(max_batch_size=10)
    fresh = EngineState(settled_window=100, bodies=BodyBudget(1 << 20))
    for rec, at in log.records:
        evolve(fresh, rec, at)
    ids = itertools.count(1000)
    live = d.deliver(log.state, c, lambda seed: "v1", T0, lambda p: f"{p}_{next(ids)}")
    ids = itertools.count(1000)
    again = d.deliver(fresh, c, lambda seed: "v1", T0, lambda p: f"{p}_{next(ids)}")
    assert live.records == again.records


def test_a_resend_at_the_windows_edge_may_be_delivered_live_and_ignored_on_rebuild() -> None:
    # QC-24, QC-43: live, the engine folds its own settlements before they reach the log, so a
    # re-send read just after may find its ID gone; the rebuild folds it in log order and ignores
    # it. Either way the ID was delivered at least once, and the rebuild's batch ends cleanly.
    c = consumer(max_batch_size=10)
    live = EngineState(settled_window=1)
    first, second = (
        r.MessageAccepted("q", "demo", "msg_a", b"a", T0, T0),
        r.MessageAccepted("q", "demo", "msg_b", b"b", T0, T0),
    )
    acked = [r.MessagesAcknowledged("q", f"bat_{mid}", (mid,), "returned", T0) for mid in ("msg_a", "msg_b")]
    for rec in [first, acked[0], second, acked[1], first]:  # the engine's order: its own ack of b first
        evolve(live, rec)
    out = d.deliver(live, c, lambda seed: "v1", T0, new_id)
    assert out.batch is not None and out.batch.messageIds == ("msg_a",)
    log = [first, acked[0], second, first, acked[1], *out.records]  # the log's order: the re-send first
    fresh = EngineState(settled_window=1)
    for rec in log:
        evolve(fresh, rec)
    assert "msg_a" not in fresh.queue("q").messages and list(fresh.queue("q").settled.order) == ["msg_b"]
    ended = d.end_batch(fresh, c, out.batch.batchId, "abandoned", T0, new_id)
    assert [type(x) for x in ended] == [r.BatchEnded]
