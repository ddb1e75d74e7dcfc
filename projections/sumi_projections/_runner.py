"""The one projection loop: topic records -> Postgres rows, exactly once.

Each polled batch is applied in one Postgres transaction together with the
next offset of every partition it covers (projection_offsets), and on start
the consumer seeks to those stored offsets: commits never outrun durable
state, and a crash anywhere replays at most what was not yet committed.
No consumer group: the projection assigns itself every partition.
"""

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

from sumi.core import codec
from sumi.core.config import Settings

log = logging.getLogger(__name__)

Apply = Callable[[psycopg.AsyncCursor[Any], Any, int, int], Awaitable[None]]
# Optional, next to a projection module's `apply`: one partition's records (record, partition,
# offset) in log order, applied with the same effect as `apply` one by one, in fewer statements.
ApplyMany = Callable[[psycopg.AsyncCursor[Any], list[tuple[Any, int, int]]], Awaitable[None]]


class ProjectionRunner:
    def __init__(self, settings: Settings, name: str, topic: str, apply: Apply) -> None:
        self.settings = settings
        self.name = name
        self.topic = topic
        self.apply = apply
        module = sys.modules.get(getattr(apply, "__module__", ""))
        self.apply_many: ApplyMany | None = getattr(module, "apply_many", None)
        self._marked = 0.0

    async def run(self, until: dict[int, int] | None = None) -> None:
        """Project forever, or (for the audit) exactly up to `until`'s next offsets."""
        conn = await psycopg.AsyncConnection.connect(
            self.settings.database_url, autocommit=True, options=f"-c search_path={self.settings.db_schema}"
        )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in await self._partitions(consumer)]
            consumer.assign(tps)
            stored = await self._stored_offsets(conn)
            for tp in tps:
                if tp.partition in stored:
                    consumer.seek(tp, stored[tp.partition])
                else:
                    await consumer.seek_to_beginning(tp)
            while until is None or not await self._reached(consumer, tps, until):
                batch = await consumer.getmany(timeout_ms=200, max_records=1000)
                if until is not None:
                    batch = {tp: [m for m in ms if m.offset < until.get(tp.partition, 0)] for tp, ms in batch.items()}
                    batch = {tp: ms for tp, ms in batch.items() if ms}
                if batch:
                    await self._apply_batch(conn, batch)
                if until is None and (not batch or await self._at_end(consumer, tps)):
                    await self._mark_caught_up(conn)
        finally:
            await consumer.stop()
            await conn.close()

    @staticmethod
    async def _at_end(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> bool:
        """Whether the last fetch left nothing committed unapplied (under steady traffic a
        poll is rarely empty, yet the projection can be current)."""
        for tp in tps:
            end = consumer.last_stable_offset(tp)
            if end is None or await consumer.position(tp) < end:
                return False
        return True

    async def _mark_caught_up(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # Nothing committed is left to apply; /readyz reads this mark.
        now = time.monotonic()
        if now - self._marked < 1.0:
            return
        self._marked = now
        await conn.execute(
            "INSERT INTO projection_status (projection, caught_up_at) VALUES (%s, now()) "
            "ON CONFLICT (projection) DO UPDATE SET caught_up_at = now()",
            (self.name,),
        )

    @staticmethod
    async def _reached(consumer: AIOKafkaConsumer, tps: list[TopicPartition], until: dict[int, int]) -> bool:
        for tp in tps:
            if await consumer.position(tp) < until.get(tp.partition, 0):
                return False
        return True

    async def _partitions(self, consumer: AIOKafkaConsumer) -> list[int]:
        for _ in range(100):  # metadata of a just-created topic can take a moment
            parts = consumer.partitions_for_topic(self.topic)
            if parts:
                return sorted(parts)
            await consumer._client.force_metadata_update()
            await asyncio.sleep(0.1)
        raise RuntimeError(f"topic {self.topic} has no partitions")

    async def _stored_offsets(self, conn: psycopg.AsyncConnection[Any]) -> dict[int, int]:
        rows = await (
            await conn.execute(
                "SELECT partition, next_offset FROM projection_offsets WHERE projection = %s AND topic = %s",
                (self.name, self.topic),
            )
        ).fetchall()
        return {p: o for p, o in rows}

    async def _apply_batch(self, conn: psycopg.AsyncConnection[Any], batch: dict[TopicPartition, list[Any]]) -> None:
        async with conn.transaction():
            async with conn.cursor() as cur:
                for tp, messages in batch.items():
                    if self.apply_many is not None:
                        await self.apply_many(cur, [(codec.decode(m.value), tp.partition, m.offset) for m in messages])
                    else:
                        for m in messages:
                            await self.apply(cur, codec.decode(m.value), tp.partition, m.offset)
                    await cur.execute(
                        "INSERT INTO projection_offsets (projection, topic, partition, next_offset) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT (projection, topic, partition) "
                        "DO UPDATE SET next_offset = EXCLUDED.next_offset",
                        (self.name, self.topic, tp.partition, messages[-1].offset + 1),
                    )


async def run_all(runners: list[ProjectionRunner]) -> None:
    await asyncio.gather(*(r.run() for r in runners))
