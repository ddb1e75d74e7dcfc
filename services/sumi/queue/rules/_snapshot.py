"""The queue engine's state of one partition as snapshot chunks, and back (sumi.engines.snapshots).

Pure. A snapshot holds what the fold of the partition's log up to its `covers` offset holds,
column by column: every queue's head (space, next sequence number, purged), its pending and
in-flight messages in acceptance order, its settled window oldest first, and the open batches.
Restoring it and folding the log after `covers` gives the state the whole fold gives (the
heaps are rebuilt from the messages, so their entries' epochs differ, never their order).

Bodies stay in the log: a restored message keeps only where its MessageAccepted lies, and its
batch reads it back (`_bodies`), as for any body past the budget. A body the state holds with
no place in the log (a fold without offsets) is kept in the chunk. A queue's cold tail follows
its hot window in slices of their own (`cold`: IDs and the differences of its numbers, since a
tail's rows share all but their ID and rising numbers); a restore puts them back in the tail in
bulk.
"""

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from sumi.core.records import QueueSnapshotChunk
from sumi.queue._cold import Frozen
from sumi.queue.rules._state import Batch, EngineState

# A chunk is one Kafka record: well under the broker's default 1 MiB, whatever the IDs' lengths.
CHUNK_BYTES = 512 << 10
_PER_ITEM = 48  # the columns' bytes beside an ID, about
_PER_COLD = 32  # a cold row's bytes beside its ID, at most: three longs and the ID's length


class _Chunks:
    def __init__(self, snapshot_id: str, limit: int) -> None:
        self.snapshot_id = snapshot_id
        self.limit = limit
        self.made = 0
        self.done: list[QueueSnapshotChunk] = []
        self.queues: list[dict[str, Any]] = []
        self.batches: list[dict[str, Any]] = []
        self.size = 0

    def room(self, size: int) -> bool:
        return self.size == 0 or self.size + size <= self.limit

    def cut(self) -> None:
        self.done.append(QueueSnapshotChunk(self.snapshot_id, self.made, self.queues, self.batches))
        self.made += 1
        self.queues, self.batches, self.size = [], [], 0

    def take(self) -> list[QueueSnapshotChunk]:
        done, self.done = self.done, []
        return done

    def slice_of(self, q: "_Head") -> dict[str, Any]:
        s: dict[str, Any] = {
            "uid": q.uid,
            "space": q.space,
            "nextSeq": q.next_seq,
            "purged": q.purged,
            **{column: [] for column in _COLUMNS},
            "settled": [],
            "cold": {column: [] for column in _COLD},
        }
        self.queues.append(s)
        self.size += len(q.uid) + len(q.space) + _PER_ITEM
        return s

    def finish(self) -> list[QueueSnapshotChunk]:
        if self.queues or self.batches or not self.made:
            self.cut()
        return self.take()


@dataclass(frozen=True)
class _Head:
    """What a queue's slice repeats in every chunk it spans."""

    uid: str
    space: str
    next_seq: int
    purged: bool


_COLUMNS = ("ids", "seqs", "acceptedAt", "visibleAt", "offsets", "deliveries", "batches", "bodies")
_COLD = ("ids", "seqs", "acceptedAt", "offsets")


def capture(
    state: EngineState, mine: Callable[[str], bool], snapshot_id: str, limit: int = CHUNK_BYTES
) -> tuple[Iterable[QueueSnapshotChunk], int]:
    """The chunks of the state of the queues `mine` picks, and how many items they hold.

    What the hot windows, settled windows and batches hold is copied now; the cold tails
    (`_cold`), up to millions of rows, are read as they were now while the chunks are
    iterated (the writer's pace), so a snapshot never holds a backlog twice as objects."""
    chunks = _Chunks(snapshot_id, limit)
    entries = 0
    colds: list[tuple[_Head, Frozen]] = []
    for q in state.queues.values():
        if not mine(q.uid):
            continue
        head = _Head(q.uid, q.space, q.next_seq, q.purged)
        s = chunks.slice_of(head)
        for m in q.messages.values():  # the hot window, in the order it was filled
            body = m.body if m.at is None else None
            size = len(m.id) + _PER_ITEM + (len(body) if body is not None else 0)
            if not chunks.room(size):
                chunks.cut()
                s = chunks.slice_of(head)
            chunks.size += size
            offset = m.at[1] if m.at is not None else -1
            _put(s, m.id, m.seq, m.accepted_at, m.visible_at, offset, m.deliveries, m.batch, body)
        for mid in q.settled.order:
            if not chunks.room(len(mid) + 8):
                chunks.cut()
                s = chunks.slice_of(head)
            chunks.size += len(mid) + 8
            s["settled"].append(mid)
        entries += len(q.messages) + len(q.settled) + q.cold.count
        if q.cold.count:
            colds.append((head, q.cold.frozen()))
    for b in state.batches.values():
        if not mine(b.queue_uid):
            continue
        size = sum(len(mid) + 8 for mid in b.message_ids) + _PER_ITEM
        if not chunks.room(size):
            chunks.cut()
        chunks.size += size
        chunks.batches.append(
            {
                "batchId": b.id,
                "queueUid": b.queue_uid,
                "consumerUid": b.consumer_uid,
                "messageIds": list(b.message_ids),
                "attempts": list(b.attempts),
                "versionUid": b.version_uid,
                "at": b.at,
                "settledIds": list(b.settled),
                "settledHow": list(b.settled.values()),
            }
        )
        entries += 1
    if not colds:
        return chunks.finish(), entries
    return _with_cold(chunks, colds), entries


def _put(s: dict[str, Any], *row: Any) -> None:
    for column, value in zip(_COLUMNS, row, strict=True):
        s[column].append(value)


def _with_cold(chunks: _Chunks, colds: list[tuple[_Head, Frozen]]) -> Iterator[QueueSnapshotChunk]:
    yield from chunks.take()
    for head, rows in colds:
        cold = chunks.slice_of(head)["cold"]
        before = (0, 0, 0)
        for mid, seq, accepted_at, _visible_at, at in rows:
            size = len(mid) + _PER_COLD
            if not chunks.room(size):
                chunks.cut()
                yield from chunks.take()
                cold = chunks.slice_of(head)["cold"]
                before = (0, 0, 0)
            chunks.size += size
            cold["ids"].append(mid)
            cold["seqs"].append(seq - before[0])
            cold["acceptedAt"].append(accepted_at - before[1])
            cold["offsets"].append(at[1] - before[2])
            before = (seq, accepted_at, at[1])
    yield from chunks.finish()


def restore(state: EngineState, partition: int, chunks: Sequence[QueueSnapshotChunk]) -> None:
    """Put the snapshot's queues and batches into `state` (which holds none of them yet)."""
    for chunk in sorted(chunks, key=lambda c: c.index):
        for s in chunk.queues:
            _restore_slice(state, partition, s)
        for b in chunk.batches:
            state.batches[b["batchId"]] = Batch(
                b["batchId"],
                b["queueUid"],
                b["consumerUid"],
                tuple(b["messageIds"]),
                tuple(b["attempts"]),
                b["versionUid"],
                b["at"],
                settled=dict(zip(b["settledIds"], b["settledHow"], strict=True)),
            )


def _restore_slice(state: EngineState, partition: int, s: dict[str, Any]) -> None:
    q = state.queues.get(s["uid"])
    if q is None:
        q = state.queues[s["uid"]] = state.new_queue(s["uid"], s["space"], purged=s["purged"])
    q.next_seq = s["nextSeq"]
    rows: Iterable[tuple[Any, ...]] = zip(*(s[c] for c in _COLUMNS), strict=True)
    for mid, seq, accepted_at, visible_at, offset, deliveries, batch, body in rows:
        at = (partition, offset) if offset >= 0 else None
        q.restore(mid, seq, accepted_at, visible_at, at, deliveries, batch, body)
    for mid in s["settled"]:
        q.settled.add(mid)
    cold = s["cold"]
    ids = cold["ids"]
    if not ids:
        return
    seqs = list(accumulate(cold["seqs"]))
    accepted = list(accumulate(cold["acceptedAt"]))
    offsets = list(accumulate(cold["offsets"]))
    i = 0
    # Row by row until the tail has a row (a hot window configured bigger than the one that
    # wrote the snapshot takes the first ones); from then on each would go to the tail, so
    # the rest goes in bulk: a million rows in a fraction of a second.
    while i < len(ids) and not q.cold.count:
        q.restore(ids[i], seqs[i], accepted[i], accepted[i], (partition, offsets[i]), 0, None, None)
        i += 1
    q.cold.extend(ids[i:], seqs[i:], accepted[i:], partition, offsets[i:])
