"""The gateway's connections: a Postgres pool for reads, a Kafka producer for appends, the
listener and the instance log reader its requests learn their decisions from (`_decisions`,
`_logdecisions`), and a reader of the queue log for the bodies a peek shows (started at the
first such peek).

All are opened by the app's lifespan and reached through `backend(request)`; nothing
else in the gateway holds a connection. The state it keeps: `Written` and `Positions`, where
its own latest queue sends and workflow decisions landed, so a read after them waits for the
projection; and `Lookups`, the rows every request looks up, until they change.
"""

import asyncio
import logging
from collections import OrderedDict
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.structs import RecordMetadata
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request

from sumi.core.config import Settings
from sumi.core.problems import Problem
from sumi.gateway._backlog import Backlog
from sumi.gateway._decisions import Decisions
from sumi.gateway._logdecisions import LogDecisions
from sumi.gateway._lookups import Lookups
from sumi.gateway._positions import Positions
from sumi.wire import kafka, pgtext
from sumi.wire.bodies import BodyReader
from sumi.wire.topics import MAX_RECORD_BYTES, Location, partition_for

log = logging.getLogger("sumi.gateway")

Row = dict[str, Any]
BATCH_BYTES = 512 * 1024


class Written:
    """The last offset this gateway appended per queue (bounded: the oldest queues are
    forgotten first), until a read has seen the projection past it."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._last: OrderedDict[str, tuple[int, int]] = OrderedDict()

    def note(self, queue_uid: str, partition: int, offset: int) -> None:
        self._last[queue_uid] = (partition, offset)
        self._last.move_to_end(queue_uid)
        if len(self._last) > self.limit:
            self._last.popitem(last=False)

    def get(self, queue_uid: str) -> tuple[int, int] | None:
        return self._last.get(queue_uid)

    def forget(self, queue_uid: str, seen: tuple[int, int]) -> None:
        if self._last.get(queue_uid) == seen:  # not a later send's
            del self._last[queue_uid]


class Backend:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.written = Written()
        self.positions = Positions()  # where the workflow decisions it answered lie (`_positions`)
        self._pool: AsyncConnectionPool | None = None
        self._producer: AIOKafkaProducer | None = None
        self._bodies: BodyReader | None = None
        self._bodies_opening = asyncio.Lock()
        self.lookups = Lookups()
        self.decisions = Decisions(settings, self._decided, self.lookups)
        self.log_decisions = LogDecisions(settings, self.decisions)
        self.backlog = Backlog(settings.workflow_queued_max, self._queued)

    async def start(self, kafka_wait: float = 30.0) -> None:
        s = self.settings
        # open(wait=False): the gateway comes up even while Postgres is still starting;
        # /readyz reports it, requests answer 503 until it answers.
        self._pool = AsyncConnectionPool(
            s.database_url,
            open=False,
            min_size=2,
            max_size=16,
            timeout=5.0,
            kwargs={"options": f"-c search_path={s.db_schema}", "autocommit": True, "context": pgtext.ADAPTERS},
        )
        await self._pool.open(wait=False)
        self.decisions.start()
        self.backlog.start()
        self._producer = await _start_producer(s, kafka_wait)
        await self.log_decisions.start(kafka_wait)  # before the first request: none is missed

    async def stop(self) -> None:
        await self.backlog.stop()
        await self.log_decisions.stop()
        await self.decisions.stop()
        if self._bodies is not None:
            await kafka.stop(self._bodies.consumer)
        if self._producer is not None:
            await self._producer.stop()
        if self._pool is not None:
            await self._pool.close()

    @property
    def producer(self) -> AIOKafkaProducer:
        assert self._producer is not None, "backend not started"
        return self._producer

    async def fetchall(self, sql: str, params: Any = ()) -> list[Row]:
        assert self._pool is not None, "backend not started"
        async with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(sql, params)
            return await cur.fetchall()

    async def fetchone(self, sql: str, params: Any = ()) -> Row | None:
        rows = await self.fetchall(sql, params)
        return rows[0] if rows else None

    async def _decided(self, command_ids: list[str]) -> list[Row]:
        return await self.fetchall(
            "SELECT command_id, accepted, status, operation_id, problem, result FROM decisions "
            "WHERE command_id = ANY(%s)",
            (command_ids,),
        )

    async def _queued(self) -> int:
        row = await self.fetchone(
            "SELECT coalesce(sum(n), 0)::bigint AS n FROM workflow_counts WHERE status = 'queued'"
        )
        return int(row["n"]) if row else 0

    async def bodies(self, at: list[Location]) -> dict[Location, bytes]:
        """The bodies of the messages accepted at these places of the queue log; one that is not
        there is left out. A broker that cannot answer in time is `backend_unavailable`."""
        try:
            async with asyncio.timeout(self.settings.decision_timeout):
                async with self._bodies_opening:
                    if self._bodies is None:
                        consumer = kafka.new_consumer(self.settings, max_partition_fetch_bytes=1 << 20)
                        try:
                            await consumer.start()
                        except BaseException:
                            await kafka.stop(consumer)
                            raise
                        self._bodies = BodyReader(consumer, self.settings.topic("queue"))
                return await self._bodies.read(at)
        except (TimeoutError, KafkaError, RuntimeError) as exc:
            raise Problem("backend_unavailable", "the queue log could not be read; retry") from exc

    def partition(self, key: str) -> int:
        return partition_for(key, self.settings.partitions)

    async def send(self, topic: str, key: str, value: bytes) -> RecordMetadata:
        """Append one record with acks=all; returns once it is durable."""
        return await self.producer.send_and_wait(topic, value, key=key.encode(), partition=self.partition(key))

    async def send_in_order(self, topic: str, key: str, values: list[bytes]) -> list[RecordMetadata]:
        # Enqueue all first, then await: one partition + the idempotent producer keep
        # array order while the batch shares round trips.
        part = self.partition(key)
        futures = [await self.producer.send(topic, v, key=key.encode(), partition=part) for v in values]
        return [await f for f in futures]


async def _start_producer(settings: Settings, wait: float) -> AIOKafkaProducer:
    deadline = asyncio.get_running_loop().time() + wait
    while True:
        # A queue send of 100 small messages fits one record batch of 512 KiB (not 7 of the
        # default 16 KiB). No linger: a lone command goes at once, and concurrent ones still
        # share a produce request, since the client sends one request per broker at a time and
        # what arrives meanwhile waits in the batch behind it. A batch stays well under the
        # queue topic's 1 MiB record-batch limit (a larger record still goes alone).
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap,
            acks="all",
            enable_idempotence=True,
            max_request_size=MAX_RECORD_BYTES,
            max_batch_size=BATCH_BYTES,
            linger_ms=0,
        )
        try:
            await producer.start()
            return producer
        except BaseException as exc:  # a stop while it starts included: an unstopped client logs errors
            await producer.stop()
            if not isinstance(exc, KafkaConnectionError) or asyncio.get_running_loop().time() > deadline:
                raise
            log.warning("Kafka at %s not reachable yet; retrying", settings.kafka_bootstrap)
            await asyncio.sleep(1.0)


def backend(request: Request) -> Backend:
    return request.app.state.backend  # type: ignore[no-any-return]
