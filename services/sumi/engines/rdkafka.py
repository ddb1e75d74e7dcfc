"""One engine replica's Kafka I/O on librdkafka: its group member and one transactional producer
that commits everything ready, across every partition the replica holds, in one transaction.

Why librdkafka (docs/decisions.md, "One transaction per replica"): aiokafka speaks only
TxnOffsetCommit v0, so a transactional ID per partition is its only fence against a replica
that lost the partition, and every step pays a transaction per partition. librdkafka sends the
consumer group's generation with the offsets (KIP-447): a replica's commit after its group
moved on fails (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID), whatever its transactional ID, so one
producer per replica is fenced as well as one per partition was.

Threads. The consumer is called from one thread only, ours (`Member`): librdkafka's
`consumer_group_metadata()` waits for ever when asked while another thread polls, so the
metadata is read there, after each rebalance, and kept for the producer. The rebalance
callbacks run on that thread and hand the partitions to the event loop; a revocation waits
there until the engine has drained them (librdkafka heartbeats from a thread of its own, so a
long drain costs no membership). Newly assigned partitions stay paused until the engine has
folded them and resumes them. A transaction's calls run on one more thread (`Transactions`),
one hop per transaction, not one per call (what `confluent_kafka.aio` does, at three times the
CPU).

Group commit: what is handed to `Transactions.commit` while a transaction is committing goes
into the next one, so nothing waits when nothing else is ready and a busy replica commits as
often as the broker answers, not once per step.
"""

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck

log = logging.getLogger(__name__)

TURNS = 2  # transactional producers a replica's transactions take turns on
POLL_S = 0.5  # how long a poll waits for records: what a resume may wait for the next one
Partition = tuple[str, int]  # topic, partition
Offsets = dict[Partition, int]  # the next offset to read of each input partition
Handler = Callable[[list[Partition]], Coroutine[Any, Any, None]]

# The errors that say this replica's generation, or its producer, is no longer the group's.
FENCING = frozenset(
    {
        ck.KafkaError.ILLEGAL_GENERATION,
        ck.KafkaError.UNKNOWN_MEMBER_ID,
        ck.KafkaError.FENCED_INSTANCE_ID,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError._FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    }
)


class Fenced(Exception):
    """A newer generation of the group, or a newer producer of this transactional ID, holds
    what this replica would commit: the transaction was aborted. `final`: the producer itself
    was fenced and commits nothing more; otherwise only the generation it committed under was
    stale, and the partitions the group gives this replica next are folded afresh."""

    def __init__(self, why: str, final: bool) -> None:
        super().__init__(why)
        self.final = final


@dataclass(frozen=True)
class Record:
    """One record to produce, encoded: the engine's codec runs before it comes here."""

    topic: str
    partition: int
    key: bytes | None
    value: bytes | None


def consumer_conf(bootstrap: str, group: str, instance: str | None = None, **extra: Any) -> dict[str, Any]:
    """read_committed, offsets committed only in transactions, eager rebalances (the engines
    fold what they are given afresh at each one), static membership for a named replica."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "range",
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 2_000,
        "socket.nagle.disable": True,  # see producer_conf
        "logger": log,  # librdkafka's lines through logging, not on stderr
    }
    if instance:
        conf["group.instance.id"] = instance
    return {**conf, **extra}


def producer_conf(bootstrap: str, transactional_id: str, max_bytes: int, **extra: Any) -> dict[str, Any]:
    # retry.backoff.ms: librdkafka's default (100) put ~100 ms on each back-to-back transaction,
    # its next AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS until the last one's markers
    # were written (bench_txn).
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 0,
        # A transaction is a chain of small requests, each waiting for the last's answer:
        # Nagle's algorithm held one behind the peer's delayed ACK.
        "socket.nagle.disable": True,
        "retry.backoff.ms": 5,
        # A replica killed inside a commit leaves its transaction open, and read_committed readers
        # of what it wrote (the next owner's fold) wait for it to time out: no longer than the
        # group's session, which the takeover waits for anyway.
        "transaction.timeout.ms": 10_000,
        "message.max.bytes": max_bytes,
        "logger": log,
    }
    return {**conf, **extra}


class Member:
    """The replica's member of its group. `messages` receives each polled batch; `assigned` is
    awaited (on the loop) with partitions left paused until `resume`; `revoked` is awaited
    before the partitions go to another member."""

    def __init__(
        self,
        conf: dict[str, Any],
        topics: Sequence[str],
        assigned: Handler,
        revoked: Handler,
        loop: asyncio.AbstractEventLoop,
        batch: int = 500,
    ) -> None:
        self.conf, self.topics, self.batch = conf, list(topics), batch
        self.assigned, self.revoked, self.loop = assigned, revoked, loop
        self.messages: asyncio.Queue[list[ck.Message]] = asyncio.Queue()
        self.metadata: Any = None  # the group generation this member holds its partitions under
        # Each assigned partition's committed offset: every
        # transaction sends at least these, so each one is checked against the generation.
        self.positions: Offsets = {}
        self.failed: asyncio.Future[None] = loop.create_future()  # set when the poll thread ends abnormally
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"rdkafka-member-{conf['group.id']}", daemon=True)
        self._calls: queue.SimpleQueue[Callable[[ck.Consumer], None]] = queue.SimpleQueue()

    def start(self) -> None:
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        await asyncio.to_thread(self._thread.join)

    def resume(self, partitions: Sequence[Partition]) -> None:
        """Let the partitions' records come, from the next poll on (within `POLL_S`): asked from
        another thread while one polls, the consumer's resume waits for ever."""
        tps = [ck.TopicPartition(t, p) for t, p in partitions]
        self._calls.put(lambda consumer: consumer.resume(tps))

    def _poll(self) -> None:
        consumer = ck.Consumer(self.conf)
        try:
            consumer.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
            while not self._stopping.is_set():
                while not self._calls.empty():
                    self._calls.get()(consumer)
                # consume() waits for a whole batch or its timeout: a record would wait up to
                # POLL_S for others. poll() returns at the first, and what else is in is taken.
                first = consumer.poll(POLL_S)
                got = [] if first is None else [first, *consumer.consume(num_messages=self.batch - 1, timeout=0)]
                ready = []
                for m in got:
                    err = m.error()
                    if err is None:
                        ready.append(m)
                    elif err.fatal():  # e.g. FENCED_INSTANCE_ID: this consumer can do nothing more
                        log.error("%s: %s (%s)", self.conf["group.id"], err.str(), err.name())
                        raise Fenced(f"{err.name()}: {err.str()}", final=True)
                    elif err.code() != ck.KafkaError._PARTITION_EOF:
                        log.warning("%s: %s", self.conf["group.id"], err)
                if ready:
                    self.loop.call_soon_threadsafe(self.messages.put_nowait, ready)
        except BaseException as exc:  # the loop learns of it; nothing here can go on alone
            self.loop.call_soon_threadsafe(_settle, self.failed, exc)
        finally:
            with contextlib.suppress(ck.KafkaException, RuntimeError):
                consumer.close()  # leaves the group (a static member's close does not)
            self.loop.call_soon_threadsafe(_settle, self.failed, None)

    def _on_assign(self, consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        consumer.assign(partitions)
        consumer.pause(partitions)  # until the engine has folded them and resumes them
        self.metadata = consumer.consumer_group_metadata()
        # None committed yet: 0, which a restart reads as "from the log's start" wherever that is.
        committed = consumer.committed(partitions, timeout=30) if partitions else []
        self.positions = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in committed}
        # Not waited for: the fold may be long, and a resume asked from inside this callback
        # would wait on it.
        parts = [(tp.topic, tp.partition) for tp in partitions]
        self.loop.call_soon_threadsafe(self.loop.create_task, self.assigned(parts))

    def _on_revoke(self, consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        self._await(self.revoked, partitions)
        consumer.unassign()

    def _on_lost(self, consumer: ck.Consumer, partitions: list[ck.TopicPartition]) -> None:
        # The group went on without us (a session expired): a commit would be fenced anyway;
        # the engine drops the partitions as on a revocation.
        self._await(self.revoked, partitions)
        consumer.unassign()

    def _await(self, handler: Handler, partitions: list[ck.TopicPartition]) -> None:
        parts = [(tp.topic, tp.partition) for tp in partitions]
        asyncio.run_coroutine_threadsafe(handler(parts), self.loop).result()


def _settle(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


@dataclass
class _Pending:
    records: list[Record] = field(default_factory=list)
    offsets: Offsets = field(default_factory=dict)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


class Transactions:
    """The replica's one transactional producer; `commit` returns once its records and offsets
    are committed, in the transaction of everything handed in meanwhile."""

    def __init__(
        self,
        conf: dict[str, Any],
        member: Member,
        timeout: float = 30.0,
        offsets: Callable[[], Offsets] | None = None,
    ) -> None:
        self.conf, self.member, self.timeout = conf, member, timeout
        # Asked as each transaction is put together: the inputs' offsets it may commit.
        self.offsets = offsets
        self.committed = 0  # transactions committed: what the grouping saves is counted by it
        self.written: dict[Partition, int] = {}  # the last offset a committed transaction wrote, per partition
        self.sent: Offsets = {}  # the input offsets committed so far
        self._producers: list[ck.Producer] = []
        self._turn = 0
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="rdkafka-txn")
        self._pending = _Pending()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fenced: Fenced | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._producers = await loop.run_in_executor(self._thread, self._init)
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        for producer in self._producers:
            await asyncio.get_running_loop().run_in_executor(self._thread, producer.flush, 5.0)
        self._thread.shutdown(wait=True)

    async def commit(self, records: Sequence[Record], offsets: Offsets) -> None:
        """Raises Fenced when this replica may commit no more."""
        await self.submit(records, offsets)

    def submit(self, records: Sequence[Record], offsets: Offsets | None = None) -> "asyncio.Future[None]":
        """`commit` without a coroutine: what is submitted first is written first."""
        done = asyncio.get_running_loop().create_future()
        if self._fenced is not None:
            done.set_exception(self._fenced)
            return done
        pending = self._pending
        pending.records.extend(records)
        for tp, offset in (offsets or {}).items():
            pending.offsets[tp] = max(offset, pending.offsets.get(tp, 0))
        pending.waiters.append(done)
        self._wake.set()
        return done

    def _init(self) -> list[ck.Producer]:
        base = self.conf["transactional.id"]
        producers = []
        for turn in range(TURNS):
            producer = ck.Producer({**self.conf, "transactional.id": f"{base}-{turn}"})
            producer.init_transactions(self.timeout)  # aborts what a predecessor of this ID left open
            producers.append(producer)
        return producers

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, _Pending()
            if not batch.waiters:
                continue
            outcome: BaseException | None = None
            # Taken now, on the loop: every decision handed in before this point is in this
            # transaction or an earlier one, so the offsets cover no command left undecided.
            offsets = {**self.offsets(), **batch.offsets} if self.offsets is not None else batch.offsets
            try:
                written = await loop.run_in_executor(self._thread, self._transaction, batch.records, offsets)
                self.committed += 1
                self.written.update(written)
                self.sent.update(offsets)
            except Exception as exc:  # each waiter's engine decides what it means for it
                outcome = exc
                if isinstance(exc, Fenced) and exc.final:
                    self._fenced = exc
            for w in batch.waiters:
                _settle(w, outcome)
            if self._fenced is not None:
                for w in self._pending.waiters:
                    _settle(w, self._fenced)
                return

    def _transaction(self, records: list[Record], offsets: Offsets) -> dict[Partition, int]:
        # Turns: after a commit the coordinator writes its markers for a few ms and answers the
        # same transactional ID's next AddPartitionsToTxn with CONCURRENT_TRANSACTIONS (retried
        # after retry.backoff.ms); the other producer's ID is idle, so the next one begins at once.
        producer = self._producers[self._turn]
        self._turn = (self._turn + 1) % len(self._producers)
        written: dict[Partition, int] = {}

        def delivered(err: Any, msg: ck.Message) -> None:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if err is None and topic is not None and partition is not None and offset is not None:
                written[(topic, partition)] = max(offset, written.get((topic, partition), -1))

        try:
            producer.begin_transaction()
            for rec in records:
                producer.produce(
                    rec.topic, value=rec.value, key=rec.key, partition=rec.partition, on_delivery=delivered
                )
            if offsets:
                tps = [ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()]
                producer.send_offsets_to_transaction(tps, self.member.metadata, self.timeout)
            producer.commit_transaction(self.timeout)  # flushes: every delivery report is in
            return written
        except ck.KafkaException as exc:
            err: ck.KafkaError = exc.args[0]
            fenced = err.fatal() or err.code() in FENCING
            if err.txn_requires_abort() and not err.fatal():
                with contextlib.suppress(ck.KafkaException):
                    producer.abort_transaction(self.timeout)
            if fenced:
                raise Fenced(f"{err.name()}: {err.str()}", final=err.fatal()) from exc
            raise
