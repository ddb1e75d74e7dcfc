"""The one generic consume -> decide -> produce loop, in Kafka transactions.

A processor owns the partitions of its input topic that the consumer group
gives it. Its state for a partition is the fold of the same partition of its
changelog topic, read to the end (read_committed) before any input of that
partition is decided. Each polled batch is decided and produced in one
transaction together with the input offsets (send_offsets_to_transaction),
so outputs, state and progress commit together or not at all. Any error ends
the process: state is only ever rebuilt from the log, never patched up.
"""

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition

from sumi.core import codec
from sumi.core.config import Settings
from sumi.core.topics import MAX_RECORD_BYTES, partition_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Out:
    topic: str
    key: str
    record: Any


class Logic(Protocol):
    def reset(self) -> None:
        """Forget all state: a new assignment is folded afresh."""

    def fold(self, record: Any) -> None:
        """Apply one changelog record to the state."""

    def handle(self, record: Any, now: int) -> Iterable[Out]:
        """Decide one input record; fold what it emits to the changelog itself."""


class TransactionalRunner:
    def __init__(
        self, settings: Settings, name: str, input_topic: str, changelog_topic: str, logic: Logic, instance: str = "0"
    ) -> None:
        self.settings = settings
        self.name = name
        self.input_topic = input_topic
        self.changelog_topic = changelog_topic
        self.logic = logic
        self.group = f"{settings.topic_prefix}-{name}"
        self.transactional_id = f"{settings.topic_prefix}-{name}-{instance}"
        self.ready = asyncio.Event()
        self.failed: BaseException | None = None
        self.rebuilding = False
        self.epoch = 0

    async def run(self) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            transactional_id=self.transactional_id,
            enable_idempotence=True,
            linger_ms=1,
            max_request_size=MAX_RECORD_BYTES,
        )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            group_id=self.group,
            isolation_level="read_committed",
            # Static membership: a restarted instance takes its partitions
            # back at once instead of after the dead one's session expires.
            group_instance_id=self.transactional_id,
            session_timeout_ms=10000,
            heartbeat_interval_ms=2000,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await producer.start()
        await consumer.start()
        try:
            consumer.subscribe([self.input_topic], listener=_Rebuild(self))
            while True:
                epoch = self.epoch
                batch = await consumer.getmany(timeout_ms=500, max_records=500)
                if self.failed is not None:
                    raise RuntimeError("rebuilding state failed") from self.failed
                # aiokafka may hand out records fetched while the listener was still folding;
                # deciding them would use no state. Give them back: fetch them again.
                if batch and (epoch != self.epoch or self.rebuilding):
                    for tp, messages in batch.items():
                        if tp in consumer.assignment():
                            consumer.seek(tp, messages[0].offset)
                elif batch:
                    await self._process(producer, batch)
        finally:
            await consumer.stop()
            await producer.stop()

    async def _process(self, producer: AIOKafkaProducer, batch: dict[TopicPartition, list[Any]]) -> None:
        async with producer.transaction():
            for messages in batch.values():
                for message in messages:
                    for out in self.logic.handle(codec.decode(message.value), int(time.time() * 1000)):
                        await producer.send(
                            out.topic,
                            codec.encode(out.record),
                            key=out.key.encode(),
                            partition=partition_for(out.key, self.settings.partitions),
                        )
            offsets = {tp: messages[-1].offset + 1 for tp, messages in batch.items()}
            await producer.send_offsets_to_transaction(offsets, self.group)

    async def rebuild(self, partitions: Iterable[int]) -> None:
        """Fold the changelog partitions to their ends before deciding anything new."""
        tps = [TopicPartition(self.changelog_topic, p) for p in partitions]
        if not tps:
            return
        reader = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap, isolation_level="read_committed", enable_auto_commit=False
        )
        await reader.start()
        try:
            reader.assign(tps)
            await reader.seek_to_beginning(*tps)
            ends = await reader.end_offsets(tps)
            count = 0
            while await _behind(reader, ends):
                for messages in (await reader.getmany(timeout_ms=200, max_records=5000)).values():
                    for message in messages:
                        self.logic.fold(codec.decode(message.value))
                        count += 1
            log.info("%s rebuilt %d records from %d partitions", self.name, count, len(tps))
        finally:
            await reader.stop()


async def _behind(reader: AIOKafkaConsumer, ends: dict[TopicPartition, int]) -> bool:
    for tp, end in ends.items():
        if await reader.position(tp) < end:
            return True
    return False


class _Rebuild(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: TransactionalRunner) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        # A fresh fold for every assignment: state of partitions lost meanwhile must not linger.
        runner = self.runner
        runner.rebuilding = True
        runner.epoch += 1
        runner.logic.reset()
        try:
            await runner.rebuild(tp.partition for tp in assigned)
        except BaseException as exc:
            # aiokafka only logs a listener's failure; deciding on a partial fold must not happen.
            runner.failed = exc
            raise
        finally:
            runner.epoch += 1
            runner.rebuilding = False
        runner.ready.set()
