"""The queue engine's pure core: fold, batching, settlement, retry limit, dead letters,
retention, rebuild. No broker, no database."""

import itertools
from typing import Any

import pytest

from sumi.core import records as r
from sumi.queue.rules import _decide as d
from sumi.queue.rules._batching import pick_version, plan
from sumi.queue.rules._control import Consumer
from sumi.queue.rules._state import ENGINE_RECORDS, EngineState, evolve

T0 = 1_700_000_000_000
_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    return f"{prefix}_{next(_ids)}"


def consumer(**over: Any) -> Consumer:
    values: dict[str, Any] = dict(
        uid="c",
        space="demo",
        queue="q",
        worker="w",
        max_batch_size=3,
        max_batch_timeout_s=0,
        max_concurrency=2,
        max_retries=1,
        retry_delay_s=10,
        dead_letter_queue=None,
        state="active",
    )
    values.update(over)
    return Consumer(**values)


class World:
    """State plus the log it was folded from, as the engine keeps them."""

    def __init__(self) -> None:
        self.state = EngineState()
        self.log: list[Any] = []

    def apply(self, records: list[Any]) -> list[Any]:
        for rec in records:
            self.log.append(rec)
            if isinstance(rec, ENGINE_RECORDS) or rec.queueUid == "q":
                evolve(self.state, rec)
        return records

    def send(self, n: int, at: int = T0, delay_ms: int = 0, queue: str = "q") -> list[str]:
        ids = [new_id("msg") for _ in range(n)]
        self.apply([r.MessageAccepted(queue, "demo", mid, mid.encode(), at, at + delay_ms) for mid in ids])
        return ids

    def deliver(self, c: Consumer, now: int = T0) -> r.BatchDelivered | None:
        out = d.deliver(self.state, c, lambda seed: "v1", now, new_id)
        self.apply(out.records)
        return out.batch


def test_batches_in_acceptance_order_up_to_max_size() -> None:
    # QC-21, QC-22
    w = World()
    ids = w.send(5)
    c = consumer()
    b1, b2 = w.deliver(c), w.deliver(c)
    assert b1 is not None and b2 is not None
    assert b1.messageIds == tuple(ids[:3]) and b2.messageIds == tuple(ids[3:])
    assert b1.attempts == (1, 1, 1) and b1.versionUid == "v1"
    assert w.deliver(c) is None
    assert w.state.queue("q").in_flight() == 5


def test_delayed_messages_wait_for_visible_at() -> None:
    w = World()
    late = w.send(1, delay_ms=5000)
    early = w.send(1)
    c = consumer()
    b = w.deliver(c, T0)
    assert b is not None and b.messageIds == tuple(early)
    assert w.state.queue("q").next_due() == T0 + 5000
    b = w.deliver(c, T0 + 5000)
    assert b is not None and b.messageIds == tuple(late)


def test_batching_plan() -> None:
    # QC-4, QC-5, QC-6
    assert plan(0, 0, 10, 5, 2, None, T0) == plan(0, 0, 10, 5, 2, None, T0)
    assert not plan(0, 0, 10, 5, 2, None, T0).send
    p = plan(3, 0, 10, 5, 2, None, T0)
    assert not p.send and p.window_opened == T0 and p.wake_at == T0 + 5000
    assert plan(3, 0, 10, 5, 2, T0, T0 + 5000).send  # the window has run out
    assert plan(10, 0, 10, 5, 2, None, T0).send  # full
    assert plan(1, 0, 10, 0, 2, None, T0).send  # timeout 0: do not wait
    assert not plan(10, 2, 10, 0, 2, None, T0).send  # maxConcurrency in flight


def test_settlement_rejections() -> None:
    # QC-25, QC-26, QC-29
    w = World()
    w.send(2)
    c = consumer()
    b = w.deliver(c)
    assert b is not None
    m1, m2 = b.messageIds
    w.apply(d.acknowledge(w.state, b.batchId, m1, T0))
    for call, code in [
        (lambda: d.acknowledge(w.state, b.batchId, m1, T0), "already_settled"),
        (lambda: d.retry(w.state, c, b.batchId, m1, None, T0, new_id), "already_settled"),
        (lambda: d.acknowledge(w.state, b.batchId, "msg_other", T0), "unknown_message"),
        (lambda: d.acknowledge(w.state, "bat_nope", m2, T0), "unknown_batch"),
        (lambda: d.acknowledge_all(w.state, "bat_nope", T0), "unknown_batch"),
        (lambda: d.retry_all(w.state, c, "bat_nope", None, T0, new_id), "unknown_batch"),
    ]:
        with pytest.raises(d.Rejected) as e:
            call()
        assert e.value.code == code
    w.apply(d.end_batch(w.state, c, b.batchId, "returned", T0, new_id))
    with pytest.raises(d.Rejected) as e:
        d.acknowledge(w.state, b.batchId, m2, T0)
    assert e.value.code == "unknown_batch"  # an ended batch takes no settlement


def test_return_acks_the_rest_and_throw_retries_the_rest() -> None:
    # QC-27, QC-28, QC-31, QC-32
    w = World()
    w.send(3)
    c = consumer(max_retries=5)
    b = w.deliver(c)
    assert b is not None
    a, x, y = b.messageIds
    w.apply(d.retry(w.state, c, b.batchId, a, 3, T0, new_id))
    ended = w.apply(d.end_batch(w.state, c, b.batchId, "returned", T0, new_id))
    assert isinstance(ended[0], r.MessagesAcknowledged) and ended[0].messageIds == (x, y)
    assert list(w.state.queue("q").messages) == [a]  # the retried one stands (QC-29)
    assert w.state.queue("q").messages[a].visible_at == T0 + 3000

    b2 = w.deliver(c, T0 + 3000)
    assert b2 is not None and b2.messageIds == (a,) and b2.attempts == (2,)
    ended = w.apply(d.end_batch(w.state, c, b2.batchId, "threw", T0 + 3000, new_id))
    retry = ended[0]
    assert isinstance(retry, r.MessageRetryScheduled)
    assert retry.visibleAt == T0 + 3000 + 10_000 and retry.attempt == 3 and retry.cause == "threw"


def test_retry_all_with_delay_and_default_delay() -> None:
    # QC-27, QC-28
    w = World()
    w.send(2)
    c = consumer(max_retries=5)
    b = w.deliver(c)
    assert b is not None
    recs = w.apply(d.retry_all(w.state, c, b.batchId, None, T0, new_id))
    assert [x.visibleAt for x in recs] == [T0 + 10_000] * 2
    assert d.acknowledge_all(w.state, b.batchId, T0) == []  # nothing unsettled left


@pytest.mark.parametrize("dlq", [None, "dlq"])
def test_at_most_one_plus_max_retries_deliveries_then_dead_letter(dlq: str | None) -> None:
    # QC-33, QC-34
    w = World()
    [mid] = w.send(1)
    c = consumer(max_retries=2, retry_delay_s=0, dead_letter_queue=dlq)
    deliveries = 0
    while True:
        b = w.deliver(c)
        if b is None:
            break
        deliveries += 1
        assert b.attempts == (deliveries,)
        w.apply(d.end_batch(w.state, c, b.batchId, "threw", T0, new_id))
    assert deliveries == 3
    last = [x for x in w.log if not isinstance(x, r.BatchEnded)][-1 if dlq is None else -2 :]
    if dlq is None:
        assert last == [r.MessageDiscarded("q", mid, "retries_exhausted", T0)]
    else:
        moved, accepted = last
        assert isinstance(moved, r.MessageDeadLettered) and moved.deadLetterQueueUid == "dlq"
        assert isinstance(accepted, r.MessageAccepted) and accepted.queueUid == "dlq"
        assert accepted.messageId != mid and accepted.body == mid.encode()  # new ID, same body
        assert accepted.acceptedAt == T0 and moved.newMessageId == accepted.messageId
    assert not w.state.queue("q").messages


def test_lowered_max_retries_applies_at_next_delivery() -> None:
    # QC-33 with an update in between: the limit is the Consumer's current one.
    w = World()
    w.send(1)
    c = consumer(max_retries=5, retry_delay_s=0)
    b = w.deliver(c)
    assert b is not None
    w.apply(d.end_batch(w.state, c, b.batchId, "stopped", T0, new_id))
    assert w.deliver(consumer(max_retries=0)) is None
    assert isinstance(w.log[-1], r.MessageDiscarded)


def test_stopped_and_abandoned_batches_are_owed_again_never_acked() -> None:
    # QC-42, QC-43, QC-44
    w = World()
    w.send(2)
    c = consumer()
    b = w.deliver(c)
    assert b is not None
    w.apply(d.acknowledge(w.state, b.batchId, b.messageIds[0], T0))
    ended = w.apply(d.end_batch(w.state, c, b.batchId, "abandoned", T0 + 1, new_id))
    assert [type(x) for x in ended] == [r.MessageRetryScheduled, r.BatchEnded]
    assert ended[0].messageId == b.messageIds[1] and ended[0].visibleAt == T0 + 1
    assert not any(isinstance(x, r.MessagesAcknowledged) and b.messageIds[1] in x.messageIds for x in w.log)


def test_retention_discards_old_pending_but_not_in_flight() -> None:
    w = World()
    old = w.send(2, at=T0)
    new = w.send(1, at=T0 + 50_000)
    c = consumer(max_batch_size=1)
    b = w.deliver(c)
    assert b is not None and b.messageIds == (old[0],)
    out = w.apply(d.expire(w.state, "q", 60, T0 + 61_000))
    assert out == [r.MessageDiscarded("q", old[1], "retention", T0 + 61_000)]
    assert set(w.state.queue("q").messages) == {old[0], new[0]}


def test_purge_forgets_the_queue_and_ignores_later_appends() -> None:
    w = World()
    w.send(3)
    w.apply(d.purge(w.state, "q", T0))
    assert not w.state.queue("q").messages
    assert d.purge(w.state, "q", T0) == []
    w.send(1)
    assert not w.state.queue("q").messages


def test_duplicate_append_is_the_same_message() -> None:
    w = World()
    [mid] = w.send(1)
    w.apply([r.MessageAccepted("q", "demo", mid, b"again", T0, T0)])
    assert len(w.state.queue("q").messages) == 1
    b = w.deliver(consumer())
    assert b is not None
    w.apply(d.end_batch(w.state, consumer(), b.batchId, "returned", T0, new_id))
    w.apply([r.MessageAccepted("q", "demo", mid, b"late", T0, T0)])
    assert not w.state.queue("q").messages  # settled for good


def test_rebuild_from_the_log_gives_the_same_state() -> None:
    # QC-43: everything the engine knows is in the log.
    w = World()
    w.send(4)
    w.send(1, delay_ms=9000)
    c = consumer(max_retries=3)
    b1 = w.deliver(c)
    assert b1 is not None
    w.apply(d.acknowledge(w.state, b1.batchId, b1.messageIds[0], T0))
    w.apply(d.retry(w.state, c, b1.batchId, b1.messageIds[1], 7, T0, new_id))
    b2 = w.deliver(c)
    assert b2 is not None
    fresh = EngineState()
    for rec in w.log:
        evolve(fresh, rec)
    q1, q2 = w.state.queue("q"), fresh.queue("q")
    summary = lambda q: {m.id: (m.visible_at, m.deliveries, m.batch) for m in q.messages.values()}  # noqa: E731
    assert summary(q1) == summary(q2)
    assert set(w.state.batches) == set(fresh.batches) == {b1.batchId, b2.batchId}
    assert fresh.batches[b1.batchId].settled == w.state.batches[b1.batchId].settled
    assert q2.next_due() == q1.next_due()


def test_pick_version_by_percentage() -> None:
    alloc = [("v1", 90), ("v2", 10)]
    picks = [pick_version(alloc, f"bat_{i}") for i in range(2000)]
    assert 0.85 < picks.count("v1") / 2000 < 0.95
    assert pick_version(alloc, "x") == pick_version(alloc, "x")
    assert pick_version([("only", 100)], "y") == "only"


def test_an_unfinished_deployment_update_keeps_the_previous_allocation() -> None:
    # forms.md WorkerDeployment 0.4.0: a change waiting on a verifying Version applies only
    # when it succeeds; a failed one leaves the previous allocation active.
    import json as _json

    from sumi.control.rules.forms.names import MODULE_WORKER, WORKER_DEPLOYMENT, WORKER_VERSION
    from sumi.core import records as rr
    from sumi.queue.rules._control import ControlTable

    t = ControlTable()

    def created(uid: str, form: str, spec: dict) -> None:  # type: ignore[type-arg]
        t.fold(rr.ResourceCreated(uid, "s", uid, form, _json.dumps(spec), 1, "op", 0))
        t.fold(rr.ResourceStateChanged(uid, "s", "active", 0))

    created("w", MODULE_WORKER, {"runtime": "javascript", "handlers": ["queue"]})
    created("v1", WORKER_VERSION, {"worker": {"resourceUid": "w"}})
    created("v2", WORKER_VERSION, {"worker": {"resourceUid": "w"}})
    old = {"worker": {"resourceUid": "w"}, "versions": [{"version": {"resourceUid": "v1"}, "percentage": 100}]}
    new = {"worker": {"resourceUid": "w"}, "versions": [{"version": {"resourceUid": "v2"}, "percentage": 100}]}
    created("d", WORKER_DEPLOYMENT, old)
    t.fold(rr.OperationStarted("op2", "update", "s", "d", 2, "alice", 1))
    t.fold(rr.ResourceUpdated("d", "s", _json.dumps(new), 2, "op2", 1))
    t.fold(rr.ResourceStateChanged("d", "s", "updating", 1))
    assert t.allocation("w") == [("v1", 100)]
    t.fold(rr.ResourceStateChanged("d", "s", "active", 2))
    t.fold(rr.OperationStateChanged("op2", "s", "succeeded", "complete", 2))
    assert t.allocation("w") == [("v2", 100)]
    t.fold(rr.OperationStarted("op3", "update", "s", "d", 3, "alice", 3))
    t.fold(rr.ResourceUpdated("d", "s", _json.dumps(old), 3, "op3", 3))
    t.fold(rr.ResourceStateChanged("d", "s", "updating", 3))
    t.fold(rr.ResourceUpdated("d", "s", _json.dumps(new), 3, "op3", 4))  # the failed update reverts
    t.fold(rr.ResourceStateChanged("d", "s", "active", 4))
    t.fold(rr.OperationStateChanged("op3", "s", "failed", "none", 4))
    assert t.allocation("w") == [("v2", 100)]
