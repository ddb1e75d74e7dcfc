"""The one projection loop: topic records -> Postgres rows, exactly once (on `sumi.wire.kafka`).

Each polled batch is applied in one Postgres transaction together with the
next offset of every partition it covers (projection_offsets), and on start
the consumer seeks to those stored offsets: commits never outrun durable
state, and a crash anywhere replays at most what was not yet committed. The transaction is
sent in one round trip (psycopg's pipeline mode, `_pipelined`).
Replicas of a projection share the partitions through a consumer group; the rows of
projection_offsets, locked by each batch, prove that no two apply the same records
(`_owned`). The audit assigns itself every partition.

A record that does not decode, or whose apply raises, is quarantined: sent to
the quarantine topic and acknowledged there before the transaction holding the
offset past it commits (a crash in between quarantines it again; the
quarantine read model keeps one row per source record). The rest of its batch
is applied as usual.
"""

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import psycopg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from sumi.core.backoff import Backoff
from sumi.core.config import Settings
from sumi.wire import kafka, pgtext
from sumi.wire.kafka import Out
from sumi.wire.membership import Membership
from sumi_projections._owned import Owned

log = logging.getLogger(__name__)

Apply = Callable[[psycopg.AsyncCursor[Any], Any, int, int], Awaitable[None]]
# Optional, next to a projection module's `apply`: one partition's records (record, partition,
# offset) in log order, applied with the same effect as `apply` one by one, in fewer statements.
ApplyMany = Callable[[psycopg.AsyncCursor[Any], list[tuple[Any, int, int]]], Awaitable[None]]
# Errors that say Postgres itself is unreachable, not that a record is bad: never a quarantine.
_INFRASTRUCTURE = (psycopg.OperationalError, psycopg.InterfaceError)
# What a restart of the broker or the database looks like from here: waited out, not a crash.
_OUTAGE = (*_INFRASTRUCTURE, KafkaError, OSError)


class Sink(Protocol):
    """Where a projection sets aside the records it quarantines."""

    async def put(self, outs: list[Out]) -> None: ...


class Opener(Protocol):
    """What a projection of sealed records opens them with before applying them (sumi.wire.keyreader)."""

    async def open(self, records: list[Any]) -> list[Any]: ...

    async def close(self) -> None: ...


class KafkaSink:
    """The live sink: the quarantine topic, acknowledged by every in-sync replica."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer: AIOKafkaProducer | None = None

    async def put(self, outs: list[Out]) -> None:
        if self.producer is None:  # most projections never quarantine anything
            self.producer = kafka.new_producer(self.settings, linger_ms=1)
            await self.producer.start()
        await kafka.send_durably(self.producer, outs, self.settings.partitions)

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.stop()


class Collected:
    """The audit's sink: `sumi replay` reports what it would quarantine and writes nothing."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    async def put(self, outs: list[Out]) -> None:
        self.records += [o.record for o in outs]


class ProjectionRunner:
    def __init__(self, settings: Settings, name: str, topic: str, apply: Apply, opener: Opener | None = None) -> None:
        self.settings = settings
        self.opener = opener
        self.name = name
        self.topic = topic
        self.apply = apply
        module = sys.modules.get(getattr(apply, "__module__", ""))
        self.apply_many: ApplyMany | None = getattr(module, "apply_many", None)
        self.quarantine = kafka.Quarantine(settings, f"projection-{name}")
        # Replicas of this projection writing the same read models share the partitions.
        self.group = f"{settings.topic_prefix}-projection-{settings.db_schema}-{name}"
        self._marked = 0.0

    async def run(self, until: dict[int, int] | None = None, sink: Sink | None = None) -> None:
        """Project forever as one replica of the group, or (for the audit) every partition
        exactly up to `until`'s next offsets."""
        conn = await psycopg.AsyncConnection.connect(
            self.settings.database_url,
            autocommit=True,
            options=f"-c search_path={self.settings.db_schema}",
            context=pgtext.ADAPTERS,
        )
        if until is None:
            member = kafka.static_member(self.settings, f"projection-{self.name}")
            consumer = kafka.new_consumer(self.settings, self.group, group_instance_id=member)
        else:
            consumer = kafka.new_consumer(self.settings)
        owned = Owned(consumer, self.name, self.topic)
        live = KafkaSink(self.settings) if sink is None else None
        sink = live or sink
        assert sink is not None
        await consumer.start()
        try:
            tps = await kafka.partitions(consumer, self.topic)
            target = None
            if until is None:
                Membership(self.group, consumer, owned).subscribe(self.topic)
            else:
                consumer.assign(tps)
                await owned.sync(conn, tps)
                target = {tp: until.get(tp.partition, 0) for tp in tps}
            async for polled in kafka.batches(consumer, target, max_records=1000):
                batch = polled
                if target is not None:
                    batch = {tp: [m for m in ms if m.offset < target[tp]] for tp, ms in polled.items()}
                    batch = {tp: ms for tp, ms in batch.items() if ms}
                if batch:
                    await self._apply_batch(conn, owned, batch, sink)
                # What a rebalance brought, read from its rows before the next fetch: a batch
                # fetched before this seek must never be applied after it.
                await owned.sync(conn)
                settled = bool(consumer.assignment()) and not owned.unsynced  # joined, every partition read
                if until is None and settled and (not batch or await self._at_end(consumer)):
                    await self._mark_caught_up(conn)
        finally:
            await consumer.stop()
            await conn.close()
            if self.opener is not None:
                await self.opener.close()
            if live is not None:
                await live.close()

    @staticmethod
    async def _at_end(consumer: AIOKafkaConsumer) -> bool:
        """Whether the last fetch left nothing committed unapplied in this replica's partitions
        (under steady traffic a poll is rarely empty, yet the projection can be current)."""
        for tp in consumer.assignment():
            end = consumer.last_stable_offset(tp)
            if end is None or await consumer.position(tp) < end:
                return False
        return True

    async def _mark_caught_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # Nothing committed is left to apply; /readyz reads this mark.
        now = time.monotonic()
        if now - self._marked < 2.0:  # /readyz allows 5 s
            return
        self._marked = now
        await conn.execute(
            "INSERT INTO projection_status (projection, caught_up_at) VALUES (%s, now()) "
            "ON CONFLICT (projection) DO UPDATE SET caught_up_at = now()",
            (self.name,),
        )

    async def _apply_batch(
        self, conn: psycopg.AsyncConnection[Any], owned: Owned, batch: dict[TopicPartition, list[Any]], sink: Sink
    ) -> None:
        now = int(time.time() * 1000)
        mine = {tp: ms for tp, ms in batch.items() if owned.owns(tp)}
        good, outs = self._decode(mine, now)
        if not outs:
            if self.opener is not None:
                await self._open(good)
            moved = await self._pipelined(conn, owned, mine, good)
            if moved is not None:
                owned.committed(moved)
                return
        await self._one_by_one(conn, owned, batch, sink, now)

    def _decode(
        self, batch: dict[TopicPartition, list[Any]], now: int
    ) -> tuple[dict[TopicPartition, list[tuple[Any, Any]]], list[Out]]:
        outs: list[Out] = []
        good: dict[TopicPartition, list[tuple[Any, Any]]] = {}
        for tp, messages in batch.items():
            for m in messages:
                record = kafka.decode(m.value)
                if isinstance(record, kafka.Rejected):
                    outs.append(self.quarantine.out(m, record, now))
                else:
                    good.setdefault(tp, []).append((record, m))
        return good, outs

    async def _open(self, good: dict[TopicPartition, list[tuple[Any, Any]]]) -> None:
        assert self.opener is not None
        for tp, items in good.items():
            opened = await self.opener.open([rec for rec, _ in items])
            good[tp] = [(rec, m) for rec, (_, m) in zip(opened, items, strict=True)]

    async def _pipelined(
        self,
        conn: psycopg.AsyncConnection[Any],
        owned: Owned,
        batch: dict[TopicPartition, list[Any]],
        good: dict[TopicPartition, list[tuple[Any, Any]]],
    ) -> dict[int, int] | None:
        """The batch as one transaction in one round trip (psycopg's pipeline mode): the
        offsets rows' claim, every statement, the rows' move and the commit are sent without
        waiting for one another; a statement per record and a round trip per statement were
        most of the projection's time and of a create's answer. None, with nothing applied,
        when a partition's row moved on or a record does not apply: the batch then goes
        through `_one_by_one`, which locks and compares in Python and quarantines.

        The transaction is begun and ended by hand: psycopg's transaction blocks sync the
        pipeline on entry and exit, a round trip each."""
        if not batch:
            return {}
        try:
            async with conn.pipeline() as pipe, conn.cursor() as cur:
                await cur.execute("BEGIN")
                try:
                    await owned.claim(cur, batch)  # first: no other replica applies these meanwhile
                    await self._apply_all(cur, good)
                    moved = {tp.partition: ms[-1].offset + 1 for tp, ms in batch.items()}
                    await owned.move(cur, moved)
                    await cur.execute("COMMIT")
                    await pipe.sync()
                except _INFRASTRUCTURE:
                    raise
                except Exception:
                    await self._roll_back(pipe, cur)
                    raise
        except _INFRASTRUCTURE:
            raise
        except psycopg.errors.SerializationFailure:
            return None  # a rebalance moved a partition on: `lock` finds which
        except Exception:
            log.warning("projection %s: a record of the batch does not apply; applying one by one", self.name)
            return None
        return moved

    @staticmethod
    async def _roll_back(pipe: psycopg.AsyncPipeline, cur: psycopg.AsyncCursor[Any]) -> None:
        with contextlib.suppress(psycopg.Error):
            await pipe.sync()  # whatever was queued has run (or been skipped after the error)
        try:
            await cur.execute("ROLLBACK")
            await pipe.sync()
        except psycopg.Error as exc:  # a connection that cannot roll back is replaced, not reused
            raise psycopg.OperationalError(f"rollback failed: {exc}") from exc

    async def _apply_all(
        self, cur: psycopg.AsyncCursor[Any], good: dict[TopicPartition, list[tuple[Any, Any]]]
    ) -> None:
        for tp, items in good.items():
            if self.apply_many is not None:
                await self.apply_many(cur, [(rec, tp.partition, m.offset) for rec, m in items])
            else:
                for rec, m in items:
                    await self.apply(cur, rec, tp.partition, m.offset)

    async def _one_by_one(
        self,
        conn: psycopg.AsyncConnection[Any],
        owned: Owned,
        batch: dict[TopicPartition, list[Any]],
        sink: Sink,
        now: int,
    ) -> None:
        """A batch the pipelined path gave back (a record that does not decode or apply, or a
        partition that moved on), a round trip per statement: the partitions that moved on are
        dropped (`lock`), each record that does not apply is quarantined, the rest applied, in
        one transaction with the offsets."""
        async with conn.transaction():
            async with conn.cursor() as cur:
                mine = await owned.lock(cur, batch)  # first: no other replica applies these meanwhile
                batch = {tp: ms for tp, ms in batch.items() if tp in mine}
                good, outs = self._decode(batch, now)
                if self.opener is not None:
                    await self._open(good)
                outs += await self._apply(conn, cur, good, now)
                if outs:  # durably set aside before the offsets below move past them
                    await sink.put(outs)
                moved = {tp.partition: messages[-1].offset + 1 for tp, messages in batch.items()}
                await owned.move(cur, moved)
        owned.committed(moved)

    async def _apply(
        self,
        conn: psycopg.AsyncConnection[Any],
        cur: psycopg.AsyncCursor[Any],
        good: dict[TopicPartition, list[tuple[Any, Any]]],
        now: int,
    ) -> list[Out]:
        """Apply the batch's records; quarantine each one whose apply raises (found one by one)."""
        try:
            async with conn.transaction():  # a savepoint: a failure undoes this batch's rows only
                await self._apply_all(cur, good)
            return []
        except _INFRASTRUCTURE:
            raise
        except Exception:
            log.warning("projection %s: a record of the batch does not apply; applying one by one", self.name)
        outs = []
        for tp, items in good.items():
            for rec, m in items:
                try:
                    async with conn.transaction():
                        await self.apply(cur, rec, tp.partition, m.offset)
                except _INFRASTRUCTURE:
                    raise
                except Exception as exc:
                    outs.append(self.quarantine.out(m, kafka.failed(exc), now))
        return outs


async def run_all(runners: list[ProjectionRunner]) -> None:
    await asyncio.gather(*(keep_running(r) for r in runners))


async def keep_running(runner: ProjectionRunner) -> None:
    """Run a projection through outages of Postgres or Kafka, each projection on its own.

    A run that meets one ends (its transaction rolled back, nothing half-applied) and starts
    again from its stored offsets after an exponential backoff, with one line in the log per
    try rather than a traceback and a process restart a second."""
    backoff = Backoff()
    while True:
        started = time.monotonic()
        try:
            await runner.run()
            return
        except _OUTAGE as exc:
            wait = backoff.after_failure(time.monotonic() - started)
            first = str(exc).strip().splitlines()[:1]
            log.warning("projection %s: %s %s; again in %.1fs", runner.name, type(exc).__name__, *first or [""], wait)
            await asyncio.sleep(wait)
