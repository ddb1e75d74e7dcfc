"""The queue engine's snapshots (issue 17, item 3): a snapshot of the fold of a log prefix,
restored, then the tail folded on it, equals the fold of the whole log. Pure: no broker."""

import io
import random
from itertools import accumulate
from typing import Any

import fastavro
import pytest

from sumi.core import records as r
from sumi.queue.rules import _decide as d
from sumi.queue.rules._memory import BodyBudget
from sumi.queue.rules._snapshot import capture, restore
from sumi.queue.rules._state import EngineState, evolve
from sumi.wire import codec
from sumi.wire.topics import Location
from tests.unit.queue.test_engine_core import T0, consumer, new_id

WINDOW, BUDGET = 40, 2_000
HOT = {"messages": 10_000}


@pytest.fixture(autouse=True, params=[10_000, 3], ids=["all-hot", "cold-tail"])
def hot_window(request: pytest.FixtureRequest) -> None:
    """Every test twice: with every pending message an object, and with a hot window of 3 (the
    rest of the backlog in the cold tail, sumi.queue._cold)."""
    HOT["messages"] = request.param


def fresh() -> EngineState:
    return EngineState(settled_window=WINDOW, bodies=BodyBudget(BUDGET), hot_messages=HOT["messages"])


def fold(records: list[tuple[r.Record, Location]], state: EngineState | None = None) -> EngineState:
    state = fresh() if state is None else state
    for rec, at in records:
        evolve(state, rec, at)
    return state


def view(state: EngineState) -> dict[str, Any]:
    """Everything a decision can read; the heaps by what they yield, not by their layout."""
    queues = {}
    for uid, q in sorted(state.queues.items()):
        q.promote(T0 + 10**9)
        queues[uid] = {
            "head": (q.space, q.next_seq, q.purged),
            # Hot window and cold tail as one: where the window ends depends on the fold's history
            "messages": sorted(
                [(m.seq, m.id, m.accepted_at, m.visible_at, m.at, m.deliveries, m.batch) for m in q.messages.values()]
                + [(seq, mid, acc, vis, at, 0, None) for mid, seq, acc, vis, at in q.cold.rows()]
            ),
            "ready": [m.id for m in q.peek_ready(10**6)],
            "ready_count": q.ready_count,
            "settled": list(q.settled.order),
        }
    batches = {
        b.id: (b.queue_uid, b.consumer_uid, b.message_ids, b.attempts, b.version_uid, b.at, b.settled)
        for b in state.batches.values()
    }
    return {"queues": queues, "batches": batches}


def random_log(seed: int, steps: int = 300, sends: float = 0.35) -> list[tuple[r.Record, Location]]:
    """A log as the gateway and an engine write it: sends (`sends` of the steps, about; more
    build a backlog), deliveries, acks, retries that run out into a dead-letter queue, batches
    ended, a purge; each record at its own offset."""
    rnd = random.Random(seed)
    state, log = fresh(), []
    c = consumer(max_batch_size=4, max_retries=1, dead_letter_queue="dlq", retry_delay_s=0)

    def apply(records: list[r.Record]) -> None:
        for rec in records:
            at = (0, len(log))
            log.append((rec, at))
            evolve(state, rec, at)

    for _ in range(steps):
        roll = rnd.random()
        if roll < sends:
            queue = rnd.choice(["q", "q", "q", "other"])
            apply([r.MessageAccepted(queue, "demo", new_id("msg"), rnd.randbytes(rnd.randint(0, 300)), T0, T0)])
        elif roll < sends + 0.2:
            apply(d.deliver(state, c, lambda seed: "v1", T0, new_id).records)
        elif roll < sends + 0.55 and state.batches:
            b = rnd.choice(list(state.batches.values()))
            for mid in b.unsettled():
                pick = rnd.random()
                if pick < 0.5:
                    apply(d.acknowledge(state, b.id, mid, T0))
                elif pick < 0.8:
                    apply(d.retry(state, c, b.id, mid, 0, T0, new_id))
            if rnd.random() < 0.7:
                apply(d.end_batch(state, c, b.id, rnd.choice(["returned", "threw", "stopped"]), T0, new_id))
        elif roll < sends + 0.57:
            apply(d.purge(state, "other", T0))
    return log


@pytest.mark.parametrize("seed", range(12))
def test_a_snapshot_and_the_tail_equal_the_whole_fold(seed: int) -> None:
    # QC-21, QC-24, QC-33, QC-43: a start from a snapshot decides as a start from offset 0
    log = random_log(seed, sends=0.35 if seed % 2 else 0.7)  # every other one with a backlog
    whole = fold(log)
    for cut in sorted({0, 1, len(log) // 3, len(log) // 2, len(log) - 1, len(log)}):
        made, _ = capture(fold(log[:cut]), lambda uid: True, "snap_x", limit=600)
        chunks = list(made)
        assert [c.index for c in chunks] == list(range(len(chunks)))
        decoded = [codec.decode(codec.encode(c)) for c in chunks]  # as the topic gives them back
        restored = fresh()
        restore(restored, 0, decoded)  # type: ignore[arg-type]
        assert view(fold(log[cut:], restored)) == view(whole), f"cut at {cut}"


def test_a_restored_state_delivers_as_the_whole_fold_does() -> None:
    # QC-21, QC-33: the next batches, their attempts and the dead letters are the same
    log = random_log(7)
    whole, cut = fold(log), len(log) // 2
    restored = fresh()
    chunks, _ = capture(fold(log[:cut]), lambda uid: True, "snap_y")
    restore(restored, 0, list(chunks))
    fold(log[cut:], restored)
    c = consumer(max_batch_size=3, max_retries=1, dead_letter_queue="dlq")
    for _ in range(5):
        a = d.deliver(whole, c, lambda seed: "v1", T0, lambda p: "same").records
        b = d.deliver(restored, c, lambda seed: "v1", T0, lambda p: "same").records
        assert a == b
        for rec in a:
            evolve(whole, rec)
            evolve(restored, rec)


def test_a_big_queue_is_cut_into_chunks_in_acceptance_order() -> None:
    state = fresh()
    ids = [new_id("msg") for _ in range(500)]
    for i, mid in enumerate(ids):
        evolve(state, r.MessageAccepted("q", "demo", mid, b"x" * 10, T0, T0), (0, i))
    made, entries = capture(state, lambda uid: True, "snap_z", limit=2_000)
    chunks = list(made)
    assert entries == 500 and len(chunks) > 10
    assert [mid for c in chunks for s in c.queues for mid in s["ids"] + s["cold"]["ids"]] == ids
    assert all(body is None for c in chunks for s in c.queues for body in s["bodies"])  # the log has them


def test_only_the_partitions_queues_are_captured() -> None:
    state = fresh()
    for i, queue in enumerate(["mine", "theirs"]):
        evolve(state, r.MessageAccepted(queue, "demo", new_id("msg"), b"", T0, T0), (0, i))
    chunks, _ = capture(state, lambda uid: uid == "mine", "snap_p")
    assert [s["uid"] for c in chunks for s in c.queues] == ["mine"]


@pytest.mark.parametrize("restored_hot", [1, 3, 10_000])
def test_a_restore_with_another_hot_window_equals_the_whole_fold(restored_hot: int) -> None:
    # QC-43: a Host restarted with a bigger or smaller SUMI_QUEUE_HOT_MESSAGES decides the same
    log = random_log(3, steps=400, sends=0.7)
    cut = len(log) // 2
    chunks = [codec.decode(codec.encode(c)) for c in capture(fold(log[:cut]), lambda uid: True, "snap_h", 600)[0]]
    restored = EngineState(settled_window=WINDOW, bodies=BodyBudget(BUDGET), hot_messages=restored_hot)
    restore(restored, 0, chunks)  # type: ignore[arg-type]
    whole = EngineState(settled_window=WINDOW, bodies=BodyBudget(BUDGET), hot_messages=restored_hot)
    assert view(fold(log[cut:], restored)) == view(fold(log, whole))


def _as_first_format(chunk: r.QueueSnapshotChunk) -> bytes:
    """The chunk as the first chunk schema wrote it: cold rows as rows of the main columns."""
    slices = []
    for s in chunk.queues:
        s = dict(s)
        cold = s.pop("cold")
        seqs, accepted, offsets = (list(accumulate(cold[k])) for k in ("seqs", "acceptedAt", "offsets"))
        n = len(cold["ids"])
        for column, values in (
            ("ids", cold["ids"]),
            ("seqs", seqs),
            ("acceptedAt", accepted),
            ("visibleAt", accepted),
            ("offsets", offsets),
            ("deliveries", [0] * n),
            ("batches", [None] * n),
            ("bodies", [None] * n),
        ):
            s[column] = s[column] + values
        slices.append(s)
    first = codec._parse(codec.schemas_dir() / "history" / "QueueSnapshotChunk.1.avsc")
    out = io.BytesIO()
    out.write(codec.MAGIC + codec._fp(first))
    fastavro.schemaless_writer(
        out, first, {"snapshotId": chunk.snapshotId, "index": chunk.index, "queues": slices, "batches": chunk.batches}
    )
    return out.getvalue()


def test_a_snapshot_of_the_first_chunk_format_still_restores() -> None:
    # QC-43: a Host upgraded over its own snapshots starts from them, not from offset 0
    log = random_log(5, steps=400, sends=0.7)
    cut = len(log) // 2
    made, _ = capture(fold(log[:cut]), lambda uid: True, "snap_v1", 600)
    decoded = [codec.decode(_as_first_format(c)) for c in made]
    assert all(s["cold"]["ids"] == [] for c in decoded for s in c.queues)  # type: ignore[attr-defined]
    restored = fresh()
    restore(restored, 0, decoded)  # type: ignore[arg-type]
    assert view(fold(log[cut:], restored)) == view(fold(log))


def test_an_empty_state_is_one_empty_chunk() -> None:
    made, entries = capture(fresh(), lambda uid: True, "snap_e")
    chunks = list(made)
    assert entries == 0 and len(chunks) == 1 and not chunks[0].queues and not chunks[0].batches
