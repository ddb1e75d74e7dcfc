"""The one Kafka plumbing of every processor: read to the end, follow, produce in transactions, quarantine.

Every processor (control, queue engine, verifier, projections, the workflow engine to come)
reads and writes its topics through this module; none of them calls aiokafka's private parts.

- `new_consumer` / `new_producer`: read_committed, no auto-commit, idempotent, sized so that a
  quarantined record (the bad bytes plus a few fields) always fits.
- `partitions`: a topic's partitions, waiting out the metadata of a just-created topic.
- `batches`: the one read loop (every other reading is built on it): polled batches, forever
  or up to given offsets.
- `read_to_end`: catch up. Assign partitions, read them from the beginning up to the end
  offsets found on entry (read_committed: the last stable offsets), hand over each record
  with whether it lay before those ends. State rebuilt by folding a changelog is rebuilt per
  partition, so N replicas of a processor, each given some partitions by its consumer group,
  each fold only theirs.
- `follow`: after it, keep reading and hand over each record.
- `read_at`: the values at given offsets, read by a consumer of their own (the queue
  engine's bodies past its budget).
- `send` / `commit`: records (and, for a transactional processor, its input offsets) in one
  Kafka transaction, so outputs, quarantined records and progress commit together or not at all.
- `decode` / `quarantined`: the pure decision about a consumed record. Anything that is not a
  record of ours (empty, not Avro, truncated, an unknown schema fingerprint, a malformed body),
  or that its processor could not apply, becomes a `RecordQuarantined` on the quarantine topic
  with the reason, the processor, the source topic, partition and offset and the raw bytes, and
  the processor goes on with the next record: Kafka topics are shared infrastructure, and one
  bad write by anyone must never stop a processor for good.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.wire import codec, idlefetch
from sumi.wire.topics import QUARANTINE_RECORD_BYTES, partition_for

log = logging.getLogger(__name__)


# The one reason a record that decodes can still be set aside: its processor raised on it.
APPLY_FAILED = "apply_failed"


# ---- the pure part: what to do with one consumed record ------------------------------------


@dataclass(frozen=True)
class Rejected:
    """Why a consumed record is not a record of ours (see `codec.Undecodable` for the reasons)."""

    reason: str
    detail: str


def decode(value: bytes | None) -> r.Record | Rejected:
    """A record of ours, or why not. Never raises on the bytes it is given."""
    try:
        return codec.decode(value or b"")
    except codec.Undecodable as exc:
        return Rejected(exc.reason, str(exc))


def failed(exc: BaseException) -> Rejected:
    """A schema-valid record whose handling raised: a bug or a broken invariant, set aside alike."""
    return Rejected(APPLY_FAILED, f"{type(exc).__name__}: {exc}"[:2000])


def quarantined(processor: str, message: Any, why: Rejected, now: int) -> r.RecordQuarantined:
    return r.RecordQuarantined(
        processor=processor,
        sourceTopic=message.topic,
        partition=message.partition,
        offset=message.offset,
        reason=why.reason,
        detail=why.detail,
        at=now,
        value=message.value,
        key=message.key,
    )


def fold_or_skip(processor: str, message: Any, fold: Callable[[r.Record], None]) -> None:
    """Fold one changelog record at a rebuild; skip (and log) one that does not decode or whose
    fold raises. It is not quarantined here, once per restart: the projection of its topic,
    which reads every partition of it, quarantined it when it met it."""
    record = decode(message.value)
    if isinstance(record, Rejected):
        log.warning(
            "%s skips %s[%d]@%d: %s", processor, message.topic, message.partition, message.offset, record.detail
        )
        return
    try:
        fold(record)
    except Exception:  # one record a fold cannot take must not stop the processor for good
        log.exception(
            "%s skips %s[%d]@%d: folding it failed", processor, message.topic, message.partition, message.offset
        )


# ---- writing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Out:
    """One record to produce: its topic and its key (the key also picks the partition)."""

    topic: str
    key: str
    record: Any


class Quarantine:
    """Where one processor sets records aside: the quarantine topic, keyed by source topic and partition."""

    def __init__(self, settings: Settings, processor: str) -> None:
        self.processor = processor
        self.topic = settings.topic("quarantine")

    def out(self, message: Any, why: Rejected, now: int | None = None) -> Out:
        at = int(time.time() * 1000) if now is None else now
        log.warning(
            "%s quarantines %s[%d]@%d: %s (%s)",
            self.processor,
            message.topic,
            message.partition,
            message.offset,
            why.reason,
            why.detail,
        )
        return Out(self.topic, f"{message.topic}/{message.partition}", quarantined(self.processor, message, why, at))


def new_consumer(settings: Settings, group: str | None = None, **options: Any) -> AIOKafkaConsumer:
    """read_committed (a processor sees only what committed), offsets committed by the processor itself.

    A fetch is answered as soon as a record commits (the broker completes it on the commit
    marker), so `fetch_max_wait_ms` mostly bounds how often an idle consumer asks again. It
    stays at aiokafka's 500 ms while records come; a consumer idle for a few seconds asks every
    few seconds instead, and a partition to read anew never waits behind that long poll
    (`idlefetch`)."""
    defaults: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "fetch_max_wait_ms": idlefetch.SHORT_WAIT_MS,
        "group_id": group,
        "isolation_level": "read_committed",
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
    }
    return idlefetch.Consumer(**{**defaults, **options})


def static_member(settings: Settings, name: str) -> str | None:
    """A named replica's group instance ID (KIP-345: restarted, it takes its partitions back at
    once, not after its own dead session expires); None, a dynamic member, when it has no name."""
    return f"{name}-{settings.replica}" if settings.replica else None


def group_member(settings: Settings, name: str, **options: Any) -> AIOKafkaConsumer:
    """A processor's member of its group `<prefix>-<name>`: a static member when the replica is
    named, and given up on 10 s after its last heartbeat (how long its partitions wait for a
    replica to take them over when it dies)."""
    return new_consumer(
        settings,
        f"{settings.topic_prefix}-{name}",
        group_instance_id=static_member(settings, name),
        session_timeout_ms=10_000,
        heartbeat_interval_ms=2_000,
        **options,
    )


def new_producer(settings: Settings, transactional_id: str | None = None, **options: Any) -> AIOKafkaProducer:
    """Idempotent, acks=all; transactional when given an ID (which fences any earlier incarnation)."""
    defaults: dict[str, Any] = {
        "bootstrap_servers": settings.kafka_bootstrap,
        "transactional_id": transactional_id,
        "enable_idempotence": True,
        "acks": "all",
        "max_request_size": QUARANTINE_RECORD_BYTES,
    }
    return AIOKafkaProducer(**{**defaults, **options})


async def started(stack: contextlib.AsyncExitStack, client: Any) -> Any:
    """Start an aiokafka client and have `stack` stop it however the processor ends: a stop
    signal may come while it is still starting, and an unstopped client logs errors at exit."""
    stack.push_async_callback(stop, client)
    await client.start()
    return client


async def stop(client: Any) -> None:
    """Stop an aiokafka client. A consumer's stop awaits the fetches it cancels, and one cancelled
    while it backed off from a dead broker raises CancelledError out of `stop`: that must not pass
    for a cancellation of the task closing it (it hid the error the task was closing for)."""
    try:
        await client.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.warning("a Kafka client's fetch was cancelled while it stopped")


def encoded(key: str, record: Any, partitions: int) -> tuple[bytes, bytes | None, int]:
    """One record as it is written: its key's bytes, its value (None: the key's tombstone, on a
    compacted topic) and its key's partition, Kafka's own (murmur2) choice."""
    return key.encode(), None if record is None else codec.encode(record), partition_for(key, partitions)


def send(producer: AIOKafkaProducer, topic: str, key: str, record: Any, partitions: int) -> Awaitable[Any]:
    """Encode and enqueue one record (`encoded`)."""
    key_bytes, value, partition = encoded(key, record, partitions)
    return producer.send(topic, value, key=key_bytes, partition=partition)  # type: ignore[no-any-return]


async def begin_ahead(producer: AIOKafkaProducer, tps: Iterable[TopicPartition]) -> bool:
    """Begin the producer's next transaction now and have it add these partitions at once
    (AddPartitionsToTxn), before any record for them is sent: a send later goes straight to its
    Produce, a round trip less when the records come. aiokafka adds a partition only as the first
    record for it is sent, through its transaction manager's `maybe_add_partition_to_txn`; that is
    not public API, so without it nothing is begun (False) and transactions add their partitions
    as they always did. Leave the transaction through `begun_ahead`."""
    add = getattr(getattr(producer, "_txn_manager", None), "maybe_add_partition_to_txn", None)
    if add is None:
        return False
    await producer.begin_transaction()
    for tp in tps:
        add(tp)
    return True


@contextlib.asynccontextmanager
async def begun_ahead(producer: AIOKafkaProducer) -> AsyncIterator[None]:
    """`producer.transaction()` for a transaction `begin_ahead` began: leaving it commits, or
    aborts on an error unless the producer failed for good, as aiokafka's does."""
    try:
        yield
    except BaseException:
        if not producer._txn_manager.is_fatal_error():
            await producer.abort_transaction()
        raise
    await producer.commit_transaction()


async def commit(
    producer: AIOKafkaProducer,
    outs: Iterable[Out],
    partitions: int,
    offsets: Mapping[TopicPartition, int] | None = None,
    group: str | None = None,
) -> None:
    """One transaction: every record, and the group's next input offsets with them."""
    async with producer.transaction():
        for out in outs:
            await send(producer, out.topic, out.key, out.record, partitions)
        if offsets:
            await producer.send_offsets_to_transaction(dict(offsets), group)


async def send_durably(producer: AIOKafkaProducer, outs: Iterable[Out], partitions: int) -> None:
    """For a processor whose progress is not in Kafka (a Postgres projection): acknowledged by
    every in-sync replica before the caller moves its own progress past the records."""
    pending = [await send(producer, o.topic, o.key, o.record, partitions) for o in outs]
    for fut in pending:
        await fut


# ---- reading ---------------------------------------------------------------------------------


async def partitions(consumer: AIOKafkaConsumer, topic: str, attempts: int = 100) -> list[TopicPartition]:
    """Every partition of `topic`; a just-created topic's metadata can take a moment to arrive."""
    for _ in range(attempts):
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        await _refresh_metadata(consumer)
        await asyncio.sleep(0.1)
    raise RuntimeError(f"topic {topic} has no partitions")


async def behind(consumer: AIOKafkaConsumer, ends: Mapping[TopicPartition, int]) -> bool:
    """Whether any partition's position is still short of its end."""
    for tp, end in ends.items():
        if await consumer.position(tp) < end:
            return True
    return False


async def batches(
    consumer: AIOKafkaConsumer,
    until: Mapping[TopicPartition, int] | None = None,
    timeout_ms: int = 1000,
    max_records: int = 5000,
) -> AsyncIterator[dict[TopicPartition, list[Any]]]:
    """The one read loop: every polled batch (empty when nothing came within `timeout_ms`),
    forever, or until each partition's position has reached `until`. A batch may run past
    `until` (a fetch returns what it returns): the caller decides what those records mean."""
    while until is None or await behind(consumer, until):
        yield await consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)


async def read_to_end(
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    on_message: Callable[[Any, bool], None],
    max_records: int = 5000,
    starts: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    """Catch up: `tps` from the beginning (or from `starts`, where given) up to the end offsets
    found on entry.

    `on_message(message, before_end)` sees every record read, in order per partition; records
    past an end (written meanwhile) come with `before_end` False. Returns the ends."""
    consumer.assign(tps)
    starts = starts or {}
    from_start = [tp for tp in tps if tp not in starts]
    if from_start:  # none named would seek every assigned partition
        await consumer.seek_to_beginning(*from_start)
    for tp, offset in starts.items():
        consumer.seek(tp, offset)
    ends: dict[TopicPartition, int] = await consumer.end_offsets(tps) if tps else {}
    async for batch in batches(consumer, ends, max_records=max_records):
        for tp, messages in batch.items():
            end = ends[tp]
            for m in messages:
                on_message(m, m.offset < end)
    return ends


async def follow(
    consumer: AIOKafkaConsumer,
    on_message: Callable[[Any], None],
    after_batch: Callable[[], None] | None = None,
    max_records: int = 5000,
) -> None:
    """Follow: hand over every record read from here on, forever."""
    async for batch in batches(consumer, max_records=max_records):
        for messages in batch.values():
            for m in messages:
                on_message(m)
        if batch and after_batch is not None:
            after_batch()


async def read_at(
    consumer: AIOKafkaConsumer, topic: str, offsets: Iterable[tuple[int, int]], gap: int = 500, polls: int = 30
) -> dict[tuple[int, int], bytes | None]:
    """The values at these (partition, offset)s of `topic`, committed records all.

    One partition at a time is assigned, so the consumer's prefetch reads only there, and it
    is paused after. Nearby offsets are read forward from one seek (a batch's messages mostly
    lie together); one more than `gap` further on gets a seek of its own. An offset that
    holds nothing (a deleted segment) is left out; `polls` empty polls in a row raise."""
    wanted: dict[int, list[int]] = {}
    for p, o in sorted(set(offsets)):
        wanted.setdefault(p, []).append(o)
    out: dict[tuple[int, int], bytes | None] = {}
    for p, todo in wanted.items():
        tp = TopicPartition(topic, p)
        consumer.assign([tp])
        try:
            await _read_partition(consumer, tp, todo, gap, polls, out)
        finally:
            consumer.pause(tp)
    return out


async def _read_partition(
    consumer: AIOKafkaConsumer,
    tp: TopicPartition,
    todo: list[int],
    gap: int,
    polls: int,
    out: dict[tuple[int, int], bytes | None],
) -> None:
    i, empty = 0, 0
    consumer.seek(tp, todo[0])
    while i < len(todo):
        got = (await consumer.getmany(tp, timeout_ms=1000, max_records=500)).get(tp, [])
        empty = 0 if got else empty + 1
        if empty >= polls:
            raise RuntimeError(f"{tp.topic}[{tp.partition}]@{todo[i]} could not be read")
        for m in got:
            while i < len(todo) and todo[i] < m.offset:
                i += 1  # not there
            if i < len(todo) and todo[i] == m.offset:
                out[(tp.partition, m.offset)] = m.value
                i += 1
        if got and i < len(todo) and todo[i] - got[-1].offset > gap:
            consumer.seek(tp, todo[i])


# ---- private aiokafka: the one place (tests/unit/core/test_kafka_private.py holds it) --------
#
# aiokafka has no public call that refreshes a consumer's metadata for a topic it has not
# assigned yet, and no public knob for the transaction retry backoff. Both are used here and
# nowhere else; the unit test fails when a new aiokafka moves either.


async def _refresh_metadata(consumer: AIOKafkaConsumer) -> None:
    await consumer._client.force_metadata_update()


async def reachable(producer: AIOKafkaProducer) -> None:
    """Raises unless a broker answers a metadata request now (the gateway's readiness)."""
    await producer.client.fetch_all_metadata()


# aiokafka retries an AddPartitionsToTxn that the broker refuses with CONCURRENT_TRANSACTIONS
# (it is still writing the previous commit's markers, KAFKA-5477) after a fixed 20 ms. A
# processor that commits back to back (the queue engine's outbox) paid that on nearly every
# transaction under load; the markers of a commit take a few ms. Measured on the reference
# machine, back-to-back transactions of one record: p50 10 ms with a 5 ms retry, 4 ms with 1 ms
# (and no better at 0.5 ms): a step commit at concurrency 1 is exactly that pattern.
TXN_RETRY_S = 0.001


def shorten_txn_retry() -> None:
    import aiokafka.producer.sender as sender

    if isinstance(getattr(sender, "BACKOFF_OVERRIDE", None), float):
        sender.BACKOFF_OVERRIDE = min(sender.BACKOFF_OVERRIDE, TXN_RETRY_S)
