"""A benchmark's view of the Host's topics: what becomes readable (committed), from now on."""

import asyncio
import contextlib
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from sumi.core.config import Settings


class Tail:
    """Follows `topics` from their ends (read_committed) and hands each fetched batch to `take`,
    which reads its own clock: the moment a record became readable to a client."""

    topics: tuple[str, ...] = ()

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.task: asyncio.Task[None] | None = None

    def take(self, batch: dict[TopicPartition, list[Any]]) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            fetch_max_wait_ms=5,
        )
        await self.consumer.start()
        tps = [
            TopicPartition(self.settings.topic(topic), p)
            for topic in self.topics
            for p in range(self.settings.partitions)
        ]
        self.consumer.assign(tps)
        await self.consumer.seek_to_end(*tps)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.take(await self.consumer.getmany(timeout_ms=100, max_records=10_000))

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()
