"""The queue engine's state of one partition as snapshot chunks, and back (sumi.engines.snapshots).

Pure. A snapshot holds what the fold of the partition's log up to its `covers` offset holds,
column by column: every queue's head (space, next sequence number, purged), its pending and
in-flight messages in acceptance order, its settled window oldest first, and the open batches.
Restoring it and folding the log after `covers` gives the state the whole fold gives (the
heaps are rebuilt from the messages, so their entries' epochs differ, never their order).

Bodies stay in the log: a restored message keeps only where its MessageAccepted lies, and its
batch reads it back (`_bodies`), as for any body past the budget. A body the state holds with
no place in the log (a fold without offsets) is kept in the chunk.
"""

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sumi.core.records import QueueSnapshotChunk
from sumi.queue._state import Batch, EngineState, Message, QueueState

# A chunk is one Kafka record: well under the broker's default 1 MiB, whatever the IDs' lengths.
CHUNK_BYTES = 512 << 10
_PER_ITEM = 48  # the columns' bytes beside an ID, about


class _Chunks:
    def __init__(self, snapshot_id: str, limit: int) -> None:
        self.snapshot_id = snapshot_id
        self.limit = limit
        self.done: list[QueueSnapshotChunk] = []
        self.queues: list[dict[str, Any]] = []
        self.batches: list[dict[str, Any]] = []
        self.size = 0

    def room(self, size: int) -> bool:
        return self.size == 0 or self.size + size <= self.limit

    def cut(self) -> None:
        self.done.append(QueueSnapshotChunk(self.snapshot_id, len(self.done), self.queues, self.batches))
        self.queues, self.batches, self.size = [], [], 0

    def slice_of(self, q: QueueState) -> dict[str, Any]:
        s: dict[str, Any] = {
            "uid": q.uid,
            "space": q.space,
            "nextSeq": q.next_seq,
            "purged": q.purged,
            **{column: [] for column in _COLUMNS},
            "settled": [],
        }
        self.queues.append(s)
        self.size += len(q.uid) + len(q.space) + _PER_ITEM
        return s

    def finish(self) -> list[QueueSnapshotChunk]:
        if self.queues or self.batches or not self.done:
            self.cut()
        return self.done


_COLUMNS = ("ids", "seqs", "acceptedAt", "visibleAt", "offsets", "deliveries", "batches", "bodies")


def capture(
    state: EngineState, mine: Callable[[str], bool], snapshot_id: str, limit: int = CHUNK_BYTES
) -> tuple[list[QueueSnapshotChunk], int]:
    """The chunks of the state of the queues `mine` picks, and how many items they hold."""
    chunks = _Chunks(snapshot_id, limit)
    entries = 0
    for q in state.queues.values():
        if not mine(q.uid):
            continue
        s = chunks.slice_of(q)
        for m in q.messages.values():  # insertion order is acceptance order
            body = m.body if m.at is None else None
            size = len(m.id) + _PER_ITEM + (len(body) if body is not None else 0)
            if not chunks.room(size):
                chunks.cut()
                s = chunks.slice_of(q)
            chunks.size += size
            s["ids"].append(m.id)
            s["seqs"].append(m.seq)
            s["acceptedAt"].append(m.accepted_at)
            s["visibleAt"].append(m.visible_at)
            s["offsets"].append(m.at[1] if m.at is not None else -1)
            s["deliveries"].append(m.deliveries)
            s["batches"].append(m.batch)
            s["bodies"].append(body)
        for mid in q.settled.order:
            if not chunks.room(len(mid) + 8):
                chunks.cut()
                s = chunks.slice_of(q)
            chunks.size += len(mid) + 8
            s["settled"].append(mid)
        entries += len(q.messages) + len(q.settled)
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
    return chunks.finish(), entries


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
        q.restore(Message(mid, seq, accepted_at, body, visible_at, at=at, deliveries=deliveries, batch=batch))
    for mid in s["settled"]:
        q.settled.add(mid)
