"""The queue engine's state: the fold of the queue log (MessageAccepted + the engine's records).

Pure and deterministic. Every message of a queue is pending (waiting for its
visibleAt, or ready) or in flight in one open batch; settled messages leave
the state (their IDs are remembered so a duplicate append is ignored). The
due-time index (`waiting`, a heap by visibleAt) and the ready index (a heap by
acceptance order) are derived from the records alone, so a rebuild from the
log restores them exactly; `promote(now)` only moves due entries between them.

Memory is bounded (`_memory`): the settled IDs are a window of the most recent ones per
queue, and a body is held only within the engine's body budget; past it a pending message
keeps where its MessageAccepted lies in the log (partition, offset) and the engine reads the
body back when it delivers it. Which bodies are held depends on the order the engine folded
its partitions in, so it may differ between a live engine and a rebuild; no decision
depends on it (a decision that needs a body it lacks waits for it to be read back).

A backlog past the queue's hot window (`hot` pending messages) is held as compact columns
(`_cold.ColdTail`), oldest first, each row a ready message; `peek_ready` merges the tail's
head into the ready index by sequence number, so the tail empties in acceptance order as
batches take it. Only messages visible on acceptance and with a place in the log go there,
and only while the window is full or the tail is not empty, so the tail is always the newest
pending messages in acceptance order. A record naming a message of the tail (a discard, or a
delivery decided before a restart) takes it from there.
"""

import heapq
from dataclasses import dataclass, field

from sumi.core import records as r
from sumi.queue._cold import ColdTail
from sumi.queue.rules._memory import BodyBudget, SettledWindow
from sumi.wire.topics import Location

DEFAULT_SETTLED_WINDOW = 100_000  # sumi.core.config.Settings.queue_settled_window
DEFAULT_BODY_BUDGET = 64 << 20  # sumi.core.config.Settings.queue_body_budget_bytes
DEFAULT_HOT_MESSAGES = 10_000  # sumi.core.config.Settings.queue_hot_messages


@dataclass(slots=True)  # a backlog holds millions: no __dict__ each
class Message:
    id: str
    seq: int  # acceptance order within the queue's log
    accepted_at: int
    body: bytes | None  # None: not held (past the body budget); read back from `at`
    visible_at: int
    at: Location | None = None  # where its MessageAccepted lies in the queue log
    deliveries: int = 0  # how many times it was handed to a handler (QC-33)
    batch: str | None = None  # the open batch holding it, while in flight
    epoch: int = 0  # changes on every change; stale heap entries carry an older one
    ready: bool = False  # its live index entry is in `ready` (else in `waiting`)


@dataclass(slots=True)
class Batch:
    id: str
    queue_uid: str
    consumer_uid: str
    message_ids: tuple[str, ...]
    attempts: tuple[int, ...]
    version_uid: str
    at: int
    settled: dict[str, str] = field(default_factory=dict)  # message id -> ack | retry

    def unsettled(self) -> list[str]:
        return [m for m in self.message_ids if m not in self.settled]


@dataclass
class QueueState:
    uid: str
    space: str = ""
    messages: dict[str, Message] = field(default_factory=dict)  # acceptance order
    # (visibleAt, seq, id, epoch) and (seq, id, epoch)
    waiting: list[tuple[int, int, str, int]] = field(default_factory=list)
    ready: list[tuple[int, str, int]] = field(default_factory=list)
    ready_count: int = 0
    settled: SettledWindow = field(default_factory=lambda: SettledWindow(DEFAULT_SETTLED_WINDOW))
    bodies: BodyBudget = field(default_factory=lambda: BodyBudget(DEFAULT_BODY_BUDGET))  # the engine's, shared
    next_seq: int = 0
    # Epochs are drawn from the queue, not counted per message: an entry left in a heap by an
    # earlier message under the same ID (a re-send after the window forgot it) never matches.
    last_epoch: int = 0
    purged: bool = False
    hot: int = DEFAULT_HOT_MESSAGES  # pending messages held as objects; the rest are `cold`
    hot_pending: int = 0
    cold: ColdTail = field(default_factory=ColdTail)

    # ---- indexes -------------------------------------------------------------------------

    def _new_epoch(self, m: Message) -> None:
        self.last_epoch += 1
        m.epoch = self.last_epoch

    def _index(self, m: Message) -> None:
        self._new_epoch(m)
        m.ready = False
        heapq.heappush(self.waiting, (m.visible_at, m.seq, m.id, m.epoch))

    def _unindex(self, m: Message) -> None:
        if m.ready:
            self.ready_count -= 1
        m.ready = False
        self._new_epoch(m)

    def promote(self, now: int) -> None:
        """Move every pending message whose visibleAt has come into the ready index."""
        while self.waiting and self.waiting[0][0] <= now:
            _, seq, mid, epoch = heapq.heappop(self.waiting)
            m = self.messages.get(mid)
            if m is not None and m.epoch == epoch and m.batch is None:
                self._into_ready(m)

    def _into_ready(self, m: Message) -> None:
        m.ready = True
        self.ready_count += 1
        heapq.heappush(self.ready, (m.seq, m.id, m.epoch))

    def peek_ready(self, n: int) -> list[Message]:
        """The first n ready messages in acceptance order (promote first), the cold tail's
        (all ready) merged in by sequence number: what it yields does not depend on where the
        hot window ended, which differs between a live fold and a restored one."""
        out: list[Message] = []
        skipped: list[tuple[int, str, int]] = []
        while len(out) < n:
            entry = self.ready[0] if self.ready else None
            if self.cold.count and (entry is None or self.cold.head_seq < entry[0]):
                row = self.cold.pop()
                assert row is not None
                self._warm(row, ready=True)
                continue
            if entry is None:
                break
            heapq.heappop(self.ready)
            m = self.messages.get(entry[1])
            if m is not None and m.epoch == entry[2] and m.ready:
                out.append(m)
                skipped.append(entry)
        for entry in skipped:
            heapq.heappush(self.ready, entry)
        return out

    def ready_total(self) -> int:
        return self.ready_count + self.cold.count

    def next_due(self) -> int | None:
        while self.waiting:
            _, _, mid, epoch = self.waiting[0]
            m = self.messages.get(mid)
            if m is not None and m.epoch == epoch:
                return self.waiting[0][0]
            heapq.heappop(self.waiting)
        return None

    def in_flight(self) -> int:
        return len(self.messages) - self.hot_pending

    def pending(self) -> int:
        return self.hot_pending + self.cold.count

    def has_messages(self) -> bool:
        return bool(self.messages) or bool(self.cold.count)

    def _warm(self, row: tuple[str, int, int, int, Location], ready: bool = False) -> Message:
        """A row of the cold tail as a hot message, pending (ready: straight into the ready index)."""
        mid, seq, accepted_at, visible_at, at = row
        m = Message(mid, seq, accepted_at, None, visible_at, at=at)
        self.messages[mid] = m
        self.hot_pending += 1
        if ready:
            self._new_epoch(m)
            self._into_ready(m)
        else:
            self._index(m)
        return m

    def _hot_or_warmed(self, mid: str) -> Message | None:
        m = self.messages.get(mid)
        if m is None and (row := self.cold.take_id(mid)) is not None:
            m = self._warm(row)
        return m

    def _goes_cold(self, seq: int, accepted_at: int, visible_at: int, at: Location | None) -> bool:
        return (
            at is not None
            and visible_at == accepted_at
            and (self.cold.count > 0 or self.hot_pending >= self.hot)
            and seq > self.cold.last_seq
        )

    # ---- transitions ---------------------------------------------------------------------

    def accept(self, rec: r.MessageAccepted, at: Location | None = None) -> None:
        known = self.messages.get(rec.messageId)
        if known is not None:
            self._locate(known, at)
            return  # a re-sent append of the same message: the first one stands
        if rec.messageId in self.settled or self.purged or rec.messageId in self.cold:
            return
        self.space = rec.space
        seq = self.next_seq
        self.next_seq += 1
        if self._goes_cold(seq, rec.acceptedAt, rec.visibleAt, at):
            assert at is not None
            self.cold.append(rec.messageId, seq, rec.acceptedAt, at)
            return
        m = Message(rec.messageId, seq, rec.acceptedAt, self._held(rec.body, at), rec.visibleAt, at=at)
        self.messages[m.id] = m
        self.hot_pending += 1
        self._index(m)

    def restore(
        self,
        mid: str,
        seq: int,
        accepted_at: int,
        visible_at: int,
        at: Location | None,
        deliveries: int,
        batch: str | None,
        body: bytes | None,
    ) -> None:
        """A message as a snapshot left it (sumi.queue.rules._snapshot): indexed unless in flight."""
        if batch is None and not deliveries and body is None and self._goes_cold(seq, accepted_at, visible_at, at):
            assert at is not None
            self.cold.append(mid, seq, accepted_at, at)
            return
        m = Message(mid, seq, accepted_at, body, visible_at, at=at, deliveries=deliveries, batch=batch)
        self.messages[m.id] = m
        if m.batch is None:
            self.hot_pending += 1
            self._index(m)
        if m.body is not None:
            self.bodies.take(len(m.body))

    def _held(self, body: bytes, at: Location | None) -> bytes | None:
        if self.bodies.admit(len(body)):
            return body
        if at is None:  # nowhere to read it back from (a fold without offsets): held anyway
            self.bodies.take(len(body))
            return body
        return None

    def _locate(self, m: Message, at: Location | None) -> None:
        """The engine folds its own appends (dead letters) when it decides them, before the
        log gives their place; once it does, such a body is no longer held past the budget."""
        if m.at is None and at is not None:
            m.at = at
            if m.batch is None and self.bodies.held > self.bodies.limit:
                self._drop_body(m)

    def hold(self, mid: str, body: bytes) -> None:
        """A body read back from the log: held until the message is pending again or leaves."""
        m = self.messages.get(mid)
        if m is not None and m.body is None:
            m.body = body
            self.bodies.take(len(body))

    def _drop_body(self, m: Message) -> None:
        if m.body is not None:
            self.bodies.release(len(m.body))
            m.body = None

    def drop_bodies(self) -> None:
        for m in self.messages.values():
            self._drop_body(m)

    def deliver(self, batch_id: str, ids: tuple[str, ...], attempts: tuple[int, ...]) -> None:
        for mid, attempt in zip(ids, attempts, strict=True):
            m = self._hot_or_warmed(mid)
            if m is not None:
                if m.batch is None:
                    self.hot_pending -= 1
                self._unindex(m)
                m.batch = batch_id
                m.deliveries = attempt

    def reschedule(self, mid: str, visible_at: int) -> None:
        m = self.messages.get(mid)
        if m is not None:
            if m.batch is not None:
                self.hot_pending += 1
            self._unindex(m)
            m.batch = None
            m.visible_at = visible_at
            self._index(m)
            if self.bodies.held > self.bodies.limit and m.at is not None:
                self._drop_body(m)  # one read back for its batch, or held past the budget

    def remove(self, mid: str) -> None:
        m = self.messages.pop(mid, None)
        if m is not None:
            if m.batch is None:
                self.hot_pending -= 1
            self._unindex(m)
            self._drop_body(m)
        else:
            self.cold.take_id(mid)
        self.settled.add(mid)


@dataclass
class EngineState:
    queues: dict[str, QueueState] = field(default_factory=dict)
    batches: dict[str, Batch] = field(default_factory=dict)  # open batches only
    settled_window: int = DEFAULT_SETTLED_WINDOW  # per queue
    hot_messages: int = DEFAULT_HOT_MESSAGES  # per queue
    bodies: BodyBudget = field(default_factory=lambda: BodyBudget(DEFAULT_BODY_BUDGET))

    def queue(self, uid: str) -> QueueState:
        q = self.queues.get(uid)
        if q is None:
            q = self.queues[uid] = self.new_queue(uid)
        return q

    def new_queue(self, uid: str, space: str = "", purged: bool = False) -> QueueState:
        return QueueState(
            uid,
            space,
            settled=SettledWindow(self.settled_window),
            bodies=self.bodies,
            purged=purged,
            hot=self.hot_messages,
        )

    def open_batches(self, consumer_uid: str) -> list[Batch]:
        return [b for b in self.batches.values() if b.consumer_uid == consumer_uid]


def evolve(state: EngineState, rec: r.Record, at: Location | None = None) -> None:
    """Fold one queue-log record into the state (in place); `at` is where it lies in the log."""
    if isinstance(rec, r.MessageAccepted):
        state.queue(rec.queueUid).accept(rec, at)
    elif isinstance(rec, r.BatchDelivered):
        state.batches[rec.batchId] = Batch(
            rec.batchId, rec.queueUid, rec.consumerUid, rec.messageIds, rec.attempts, rec.versionUid, rec.at
        )
        state.queue(rec.queueUid).deliver(rec.batchId, rec.messageIds, rec.attempts)
    elif isinstance(rec, r.MessagesAcknowledged):
        q, b = state.queue(rec.queueUid), state.batches.get(rec.batchId)
        for mid in rec.messageIds:
            q.remove(mid)
            if b is not None:
                b.settled[mid] = "ack"
    elif isinstance(rec, r.MessageRetryScheduled):
        state.queue(rec.queueUid).reschedule(rec.messageId, rec.visibleAt)
        _settle(state, rec.batchId, rec.messageId, "retry")
    elif isinstance(rec, r.MessageDeadLettered):
        state.queue(rec.queueUid).remove(rec.messageId)
        _settle(state, rec.batchId, rec.messageId, "retry")
    elif isinstance(rec, r.MessageDiscarded):
        state.queue(rec.queueUid).remove(rec.messageId)
    elif isinstance(rec, r.BatchEnded):
        state.batches.pop(rec.batchId, None)
    elif isinstance(rec, r.QueuePurged):
        q = state.queue(rec.queueUid)
        q.drop_bodies()
        state.queues[rec.queueUid] = state.new_queue(rec.queueUid, q.space, purged=True)
        for bid in [b.id for b in state.batches.values() if b.queue_uid == rec.queueUid]:
            del state.batches[bid]


def _settle(state: EngineState, batch_id: str | None, mid: str, how: str) -> None:
    b = state.batches.get(batch_id) if batch_id else None
    if b is not None:
        b.settled[mid] = how


ENGINE_RECORDS = (
    r.BatchDelivered,
    r.MessagesAcknowledged,
    r.MessageRetryScheduled,
    r.MessageDeadLettered,
    r.MessageDiscarded,
    r.BatchEnded,
    r.QueuePurged,
)
