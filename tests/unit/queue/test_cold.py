"""The cold tail (issue 17, item 4): a queue's backlog past its hot window as compact columns.
Pure: no broker. The tail against a plain list doing the same, the queue state with a tiny
hot window against one holding every message as an object, and what a row costs in RAM."""

import random
import tracemalloc

import pytest

from sumi.core import records as r
from sumi.queue import _cold
from sumi.queue._cold import ColdTail
from sumi.queue.rules import _decide as d
from sumi.queue.rules._memory import BodyBudget
from sumi.queue.rules._state import EngineState, evolve
from tests.unit.queue.test_engine_core import T0, consumer, new_id


def row(i: int) -> tuple[str, int, int, int, tuple[int, int]]:
    return (f"msg_{i:06d}", i, T0 + i, T0 + i, (2, 1000 + i))


def put(tail: ColdTail, i: int) -> None:
    mid, seq, accepted, _, at = row(i)
    tail.append(mid, seq, accepted, at)


@pytest.mark.parametrize("seed", range(8))
def test_the_tail_does_what_a_list_does(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # QC-21, QC-43: rows leave in order, or out of order by ID, and the columns are cut as they go
    monkeypatch.setattr(_cold, "_COMPACT_AT", 7)
    monkeypatch.setattr(_cold, "_SEGMENT", 5)
    rnd = random.Random(seed)
    tail, model, n = ColdTail(), [], 0
    for _ in range(3000):
        roll = rnd.random()
        if roll < 0.45:
            put(tail, n)
            model.append(row(n))
            n += 1
        elif roll < 0.5:  # a restore's bulk, across segment ends
            rows = [row(i) for i in range(n, n + rnd.randrange(13))]
            tail.extend([x[0] for x in rows], [x[1] for x in rows], [x[2] for x in rows], 2, [x[4][1] for x in rows])
            model.extend(rows)
            n += len(rows)
        elif roll < 0.75:
            assert tail.pop() == (model.pop(0) if model else None)
        elif model:
            gone = model.pop(rnd.randrange(len(model)))
            found = tail.find(gone[0])
            assert found is not None
            assert tail.take(found) == gone
        assert len(tail) == len(model)
        assert list(tail.rows()) == model
        present = {m[0] for m in model}
        for probe in (row(rnd.randrange(n + 5))[0] for _ in range(3)):
            assert (probe in tail) == (probe in present)
        if model:
            assert tail.head_seq == model[0][1]


def test_a_frozen_tail_reads_the_rows_of_its_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    # QC-43: a snapshot's writer reads the tail as it was at the capture, however it changes after
    monkeypatch.setattr(_cold, "_COMPACT_AT", 2)
    tail = ColdTail()
    for i in range(10):
        put(tail, i)
    frozen = tail.frozen()
    for _ in range(6):
        tail.pop()  # a cut would move the columns under the reader: none while it reads
    found = tail.find(row(8)[0])
    assert found is not None
    tail.take(found)
    put(tail, 10)
    assert list(frozen) == [row(i) for i in range(10)]
    assert [m[0] for m in tail.rows()] == [row(i)[0] for i in (6, 7, 9, 10)]
    assert len(tail._seqs) == 5  # read through: the six rows it kept from the front are cut
    tail.pop()
    assert [m[0] for m in tail.rows()] == [row(i)[0] for i in (7, 9, 10)]


def test_a_row_costs_under_100_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    # QC-43: a backlog of a million fits in about 90 MB, not 600 (Message objects)
    monkeypatch.setattr(_cold, "_SEGMENT", 1 << 12)  # quicker under tracemalloc; the same per row
    tail, n = ColdTail(), 8 * _cold._SEGMENT  # whole segments: the one still filling is a dict
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(n):
        tail.append(f"msg_{i:026d}", i, T0, (0, i))  # IDs as long as sumi's (30 chars)
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert used / n < 100, f"{used / n:.0f} B a row"


def state(hot: int) -> EngineState:
    return EngineState(settled_window=1000, bodies=BodyBudget(10_000), hot_messages=hot)


def test_past_the_hot_window_messages_are_rows_and_batches_take_them_in_order() -> None:
    # QC-21, QC-22: batches in acceptance order across the hot window and the tail
    s = state(hot=3)
    ids = [new_id("msg") for _ in range(10)]
    for i, mid in enumerate(ids):
        evolve(s, r.MessageAccepted("q", "demo", mid, b"x", T0, T0), (0, i))
    q = s.queue("q")
    q.promote(T0)
    assert (len(q.messages), len(q.cold), q.ready_total()) == (3, 7, 10)
    c = consumer(max_batch_size=4)
    got = []
    while (out := d.deliver(s, c, lambda seed: "v1", T0, new_id)).batch is not None:
        got += list(out.batch.messageIds)
        for rec in out.records:
            evolve(s, rec)
    assert got == ids and q.ready_total() == 0 and len(q.cold) == 0


def test_a_resent_append_of_a_cold_message_is_ignored_and_a_discard_takes_it() -> None:
    # QC-24, QC-43: the first append stands; a retention discard reaches into the tail
    s = state(hot=1)
    ids = [new_id("msg") for _ in range(5)]
    for i, mid in enumerate(ids):
        evolve(s, r.MessageAccepted("q", "demo", mid, b"x", T0 + i, T0 + i), (0, i))
    evolve(s, r.MessageAccepted("q", "demo", ids[3], b"again", T0 + 9, T0 + 9), (0, 9))
    q = s.queue("q")
    assert q.pending() == 5 and q.next_seq == 5
    expired = d.expire(s, "q", retention_s=1, now=T0 + 1002)  # accepted at T0..T0+2 are past it
    assert [rec.messageId for rec in expired if isinstance(rec, r.MessageDiscarded)] == ids[:3]
    for rec in expired:
        evolve(s, rec)
    evolve(s, r.MessageDiscarded("q", ids[4], "retention", T0))  # out of order, from the middle
    assert [m.id for m in q.peek_ready(10)] == [ids[3]] and q.pending() == 1


def test_a_delayed_message_stays_hot_and_the_tail_keeps_acceptance_order() -> None:
    # QC-21: only messages visible on acceptance go to the tail (its rows are all ready)
    s = state(hot=1)
    first, delayed, later = new_id("msg"), new_id("msg"), new_id("msg")
    evolve(s, r.MessageAccepted("q", "demo", first, b"", T0, T0), (0, 0))
    evolve(s, r.MessageAccepted("q", "demo", delayed, b"", T0, T0 + 5_000), (0, 1))
    evolve(s, r.MessageAccepted("q", "demo", later, b"", T0, T0), (0, 2))
    q = s.queue("q")
    assert set(q.messages) == {first, delayed} and [m[0] for m in q.cold.rows()] == [later]
    q.promote(T0)
    assert [m.id for m in q.peek_ready(5)] == [first, later]
    q.promote(T0 + 5_000)
    assert [m.id for m in q.peek_ready(5)] == [first, delayed, later]
