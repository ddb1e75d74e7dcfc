"""Pure decisions of the queue engine: (state, settings, now) -> records.

No I/O. The engine folds what these return into its state at once (it is the
single writer of its queues' logs) and commits them in one Kafka transaction
before anything that depends on them happens: a batch is recorded before its
handler starts, a settlement before its Promise resolves (QC-43).
"""

from collections.abc import Callable
from dataclasses import dataclass

from sumi.core import records as r
from sumi.queue.rules._control import Consumer
from sumi.queue.rules._state import Batch, EngineState, Message, QueueState

NewId = Callable[[str], str]  # prefix -> fresh unique id ("bat", "msg")
Records = list[r.QueueRecord]


class Rejected(Exception):
    """A settlement the Interface refuses (QC-25); `code` becomes the Error's name."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Delivery:
    records: Records
    batch: r.BatchDelivered | None
    # Exhausted messages that wait for their body to be read back from the log (a dead
    # letter copies it): the engine reads them and decides again.
    unread: tuple[str, ...] = ()


def deliver(state: EngineState, c: Consumer, pick: Callable[[str], str], now: int, new_id: NewId) -> Delivery:
    """The next batch of 1..maxBatchSize ready messages in acceptance order (QC-21).

    A ready message that has already had 1 + maxRetries deliveries is not handed
    over again: it is dead-lettered or discarded instead (QC-33, QC-34)."""
    q = state.queue(c.queue)
    q.promote(now)
    records: Records = []
    chosen: list[Message] = []
    unread: list[str] = []
    for m in q.peek_ready(c.max_batch_size):
        if m.deliveries < 1 + c.max_retries:
            chosen.append(m)
        elif _unread(m, c):
            unread.append(m.id)
        else:
            records += exhaust(q, m.id, c, None, now, new_id)
    if not chosen:
        return Delivery(records, None, tuple(unread))
    batch_id = new_id("bat")
    batch = r.BatchDelivered(
        c.queue,
        c.uid,
        batch_id,
        tuple(m.id for m in chosen),
        tuple(m.deliveries + 1 for m in chosen),
        pick(batch_id),
        now,
    )
    return Delivery(records + [batch], batch, tuple(unread))


def _unread(m: Message, c: Consumer) -> bool:
    """Whether dead-lettering m needs its body, which the state does not hold."""
    return m.body is None and c.dead_letter_queue is not None


def exhaust(q: QueueState, mid: str, c: Consumer, batch_id: str | None, now: int, new_id: NewId) -> Records:
    """QC-34: to the dead-letter queue as a new message (new ID and time, attempts 1, same
    body, no link a reader could follow), or discarded when there is none."""
    if c.dead_letter_queue is None:
        return [r.MessageDiscarded(q.uid, mid, "retries_exhausted", now)]
    new = new_id("msg")
    body = q.messages[mid].body
    assert body is not None, "a dead letter is decided only with its body held"
    return [
        r.MessageDeadLettered(q.uid, mid, c.dead_letter_queue, new, now, batch_id),
        r.MessageAccepted(c.dead_letter_queue, _space_of(q, c), new, body, now, now),
    ]


def _space_of(q: QueueState, c: Consumer) -> str:
    return c.space or q.space


def open_batch(state: EngineState, batch_id: object) -> Batch:
    b = state.batches.get(batch_id) if isinstance(batch_id, str) else None
    if b is None:
        raise Rejected("unknown_batch", "this batch is not open")
    return b


def _unsettled(b: Batch, mid: object) -> str:
    if not isinstance(mid, str) or mid not in b.message_ids:
        raise Rejected("unknown_message", "no such message in this batch")  # QC-29
    if mid in b.settled:
        raise Rejected("already_settled", "this message is settled")  # QC-26, QC-29
    return mid


def acknowledge(state: EngineState, batch_id: object, mid: object, now: int, cause: str = "acknowledge") -> Records:
    b = open_batch(state, batch_id)
    return [r.MessagesAcknowledged(b.queue_uid, b.id, (_unsettled(b, mid),), cause, now)]


def acknowledge_all(state: EngineState, batch_id: object, now: int, cause: str = "acknowledgeAll") -> Records:
    b = open_batch(state, batch_id)
    ids = tuple(b.unsettled())
    return [r.MessagesAcknowledged(b.queue_uid, b.id, ids, cause, now)] if ids else []


def retry(
    state: EngineState,
    c: Consumer,
    batch_id: object,
    mid: object,
    delay_s: int | None,
    now: int,
    new_id: NewId,
    cause: str = "retry",
) -> Records:
    b = open_batch(state, batch_id)
    return _retry_one(state, c, b, _unsettled(b, mid), delay_s, now, new_id, cause)


def retry_all(
    state: EngineState,
    c: Consumer,
    batch_id: object,
    delay_s: int | None,
    now: int,
    new_id: NewId,
    cause: str = "retryAll",
) -> Records:
    b = open_batch(state, batch_id)
    out: Records = []
    for mid in b.unsettled():
        out += _retry_one(state, c, b, mid, delay_s, now, new_id, cause)
    return out


def _retry_one(
    state: EngineState, c: Consumer, b: Batch, mid: str, delay_s: int | None, now: int, new_id: NewId, cause: str
) -> Records:
    q = state.queue(b.queue_uid)
    m = q.messages[mid]
    if m.deliveries >= 1 + c.max_retries and _unread(m, c):
        # Its body was not read back (the batch failed before): owed again at once, and the
        # next delivery dead-letters it once the body is read (deliveries stay as they are).
        return [r.MessageRetryScheduled(q.uid, mid, now, m.deliveries + 1, cause, now, b.id)]
    if m.deliveries >= 1 + c.max_retries:  # no redelivery left (QC-33)
        return exhaust(q, mid, c, b.id, now, new_id)
    delay = c.retry_delay_s if delay_s is None else delay_s  # QC-27
    return [r.MessageRetryScheduled(q.uid, mid, now + delay * 1000, m.deliveries + 1, cause, now, b.id)]


def end_batch(
    state: EngineState, c: Consumer, batch_id: str, outcome: str, now: int, new_id: NewId, error: str | None = None
) -> Records:
    """The handler is over: settle what it left unsettled, then close the batch.

    returned -> acknowledge the rest (QC-31); threw (or a limit stopped it) -> retry the
    rest after retryDelaySeconds, settled results standing (QC-32); stopped by the engine
    (a delete's stop boundary) or abandoned by an earlier engine (a restart) -> the rest is
    owed again at once, never acknowledged (QC-42, QC-43, QC-44)."""
    b = state.batches.get(batch_id)
    if b is None:
        return []
    out: Records
    if outcome == "returned":
        out = acknowledge_all(state, batch_id, now, cause="returned")
    elif outcome == "threw":
        out = retry_all(state, c, batch_id, None, now, new_id, cause="threw")
    else:
        q = state.queue(b.queue_uid)
        out = [
            r.MessageRetryScheduled(q.uid, mid, now, q.messages[mid].deliveries + 1, outcome, now, b.id)
            for mid in b.unsettled()
            if mid in q.messages
        ]
    return out + [r.BatchEnded(b.queue_uid, b.consumer_uid, b.id, outcome, now, error)]


def expire(state: EngineState, queue_uid: str, retention_s: int, now: int) -> Records:
    """A pending message older than its queue's retention is discarded; one in flight waits
    for its batch to end."""
    q = state.queues.get(queue_uid)
    if q is None:
        return []
    limit = now - retention_s * 1000
    # The hot window is not in acceptance order (it fills from the tail), and holds few.
    out: Records = [
        r.MessageDiscarded(queue_uid, m.id, "retention", now)
        for m in q.messages.values()
        if m.accepted_at <= limit and m.batch is None
    ]
    for mid, _, accepted_at, _, _ in q.cold.rows():
        if accepted_at > limit:
            break
        out.append(r.MessageDiscarded(queue_uid, mid, "retention", now))
    return out


def next_expiry(state: EngineState, queue_uid: str, retention_s: int) -> int | None:
    """When the oldest message of the queue, pending or in flight, reaches its retention (None:
    it holds none): the retention sweep's next due time, so an idle engine does not sweep."""
    q = state.queues.get(queue_uid)
    if q is None:
        return None
    oldest = min((m.accepted_at for m in q.messages.values()), default=None)
    head = next(iter(q.cold.rows()), None)  # oldest first
    if head is not None and (oldest is None or head[2] < oldest):
        oldest = head[2]
    return None if oldest is None else oldest + retention_s * 1000


def purge(state: EngineState, queue_uid: str, now: int) -> Records:
    """Deleting a queue deletes its messages (they are its data)."""
    q = state.queues.get(queue_uid)
    if q is not None and q.purged:
        return []
    return [r.QueuePurged(queue_uid, now)]
