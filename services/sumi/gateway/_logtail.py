"""Reading one worker's lines off the log topic: its one partition (the key is Space/worker),
from a time or from near its end, and following it.

Read straight from Kafka, not from a read model: log lines are many, short-lived (the topic's
retention ends them) and read rarely, so a table would cost every line a Postgres write for
the sake of the odd reader. Each request has a consumer of its own, with no group.
"""

import asyncio
import logging
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, TopicPartition

from sumi.core.config import Settings
from sumi.core.records import WorkerLogged
from sumi.gateway._logfilter import LogFilter
from sumi.wire import codec, topics

log = logging.getLogger("sumi.gateway")
SCAN = 20_000  # without `since`, the lines looked at: the partition's last this many


class LogTail:
    def __init__(self, settings: Settings, f: LogFilter) -> None:
        self.filter = f
        self.tp = TopicPartition(
            settings.topic("logs"), topics.partition_for(topics.log_key(f.space, f.worker_uid), settings.partitions)
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100
        )

    async def open(self, follow: bool) -> int:
        """Positioned at `since`, else near the end (a follow: at the end); the end offset now."""
        try:
            await self.consumer.start()
            self.consumer.assign([self.tp])
            return await self._seek(follow)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        await self.consumer.stop()

    async def _seek(self, follow: bool) -> int:
        end: int = (await self.consumer.end_offsets([self.tp]))[self.tp]
        start = (await self.consumer.beginning_offsets([self.tp]))[self.tp]
        if self.filter.since is not None:
            found = (await self.consumer.offsets_for_times({self.tp: self.filter.since}))[self.tp]
            self.consumer.seek(self.tp, found.offset if found is not None else end)
        else:
            self.consumer.seek(self.tp, end if follow else max(start, end - SCAN))
        return end

    async def until(self, end: int) -> list[WorkerLogged]:
        """The matching lines up to offset `end`."""
        out: list[WorkerLogged] = []
        while await self.consumer.position(self.tp) < end:
            out += await self._fetch(500)
        return out

    async def follow(self) -> AsyncIterator[list[WorkerLogged]]:
        """The matching lines as they come; an empty list now and then (a heartbeat's chance)."""
        while True:
            yield await self._fetch(1000)

    async def _fetch(self, timeout_ms: int) -> list[WorkerLogged]:
        batch = await self.consumer.getmany(self.tp, timeout_ms=timeout_ms, max_records=1000)
        out = []
        for m in batch.get(self.tp, []):
            try:
                rec = codec.decode(m.value) if m.value is not None else None
            except ValueError as exc:  # not ours: skipped, the topic is no one's state
                log.debug("log topic offset %d: %s", m.offset, exc)
                continue
            if isinstance(rec, WorkerLogged) and self.filter.matches(rec):
                out.append(rec)
        return out


async def read(settings: Settings, f: LogFilter, limit: int) -> list[WorkerLogged]:
    tail = LogTail(settings, f)
    end = await tail.open(follow=False)
    try:
        lines = await asyncio.wait_for(tail.until(end), 20)
    finally:
        await tail.close()
    return lines[-limit:]
