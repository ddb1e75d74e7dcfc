"""The one consume -> decide -> produce processor, in Kafka transactions (on `sumi.core.kafka`).

A processor owns the partitions of its input topic that the consumer group
gives it; any number of replicas share them. Each partition has a transactional
producer of its own (`sumi.core.fencing`), started before the partition's
committed offset is read, so a replica that lost a partition can commit nothing
for it after. Its state for a partition is the fold of the same partition of its
changelog topic, read to the end (read_committed) before any input of that
partition is decided. Each polled batch is decided and produced in one
transaction per partition together with its input offset
(send_offsets_to_transaction), so outputs, state and progress commit together
or not at all.

An input record that does not decode, or whose handling raises, is quarantined
in that same transaction and the processor goes on with the next one. A bad
record in the changelog is skipped by the fold (the projection of that topic
quarantined it when it met it). Any other error (Kafka, a failed transaction)
ends the process: state is only ever rebuilt from the log, never patched up.
"""

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from sumi.core import assignors, kafka
from sumi.core.config import Settings
from sumi.core.fencing import Folds, PartitionProducers
from sumi.core.kafka import Out

log = logging.getLogger(__name__)


class Logic(Protocol):
    def reset(self) -> None:
        """Forget all state: a new assignment is folded afresh."""

    def fold(self, record: Any) -> None:
        """Apply one changelog record to the state."""

    def handle(self, record: Any, now: int) -> Iterable[Out]:
        """Decide one input record; fold what it emits to the changelog itself.

        If it raises, it must have left the state as it was (decide first, then fold)."""


class TransactionalRunner:
    def __init__(
        self,
        settings: Settings,
        name: str,
        input_topic: str,
        changelog_topic: str,
        logic: Logic,
        one_owner: bool = False,
    ) -> None:
        self.settings = settings
        self.name = name
        self.input_topic = input_topic
        self.changelog_topic = changelog_topic
        self.logic = logic
        self.group = f"{settings.topic_prefix}-{name}"
        self.producers = PartitionProducers(settings, name, linger_ms=0)
        self.one_owner = one_owner  # decisions span partitions: one replica holds all, the rest stand by
        self.quarantine = kafka.Quarantine(settings, name)
        self.ready = asyncio.Event()
        self.failed: BaseException | None = None
        self.folds = Folds()
        self.start: dict[TopicPartition, int] = {}  # where the last assignment set each partition
        self.pending: list[TopicPartition] | None = None  # assigned, fenced, not folded yet

    async def run(self) -> None:
        kafka.shorten_txn_retry()  # a command's decision waits on this processor's commit
        consumer = kafka.group_member(self.settings, self.name, **self._assignor())
        try:  # started inside: a stop signal while they start still stops them (unstopped clients log errors)
            await consumer.start()
            consumer.subscribe([self.input_topic], listener=_Rebuild(self, consumer))
            epoch = self.folds.epoch
            async for batch in kafka.batches(consumer, timeout_ms=500, max_records=500):
                if self.failed is not None:
                    raise RuntimeError("rebuilding state failed") from self.failed
                if self.pending is not None:  # an assignment to fold, outside its callback
                    await self._take_over(consumer, self.pending)
                # aiokafka may hand out records fetched before or while the listener folded;
                # deciding them would use the wrong state. Read on from where it set each partition.
                if batch and self.folds.stale(epoch):
                    for tp in batch:
                        if tp in consumer.assignment() and tp in self.start:
                            consumer.seek(tp, self.start[tp])
                elif batch:
                    await self._process(batch)
                epoch = self.folds.epoch  # for the next poll
        finally:
            await consumer.stop()
            await self.producers.close()

    def _assignor(self) -> dict[str, Any]:
        if not self.one_owner:
            return {}
        return {"partition_assignment_strategy": (assignors.one_owner(lambda: bool(self.producers.producers)),)}

    def decide(self, message: Any, now: int) -> list[Out]:
        """One input record's outputs, or its quarantine: never an exception."""
        record = kafka.decode(message.value)
        if isinstance(record, kafka.Rejected):
            return [self.quarantine.out(message, record, now)]
        try:
            return list(self.logic.handle(record, now))
        except Exception as exc:
            log.exception("%s could not handle %s[%d]@%d", self.name, message.topic, message.partition, message.offset)
            return [self.quarantine.out(message, kafka.failed(exc), now)]

    async def _process(self, batch: dict[TopicPartition, list[Any]]) -> None:
        """Each partition's records decided in order, committed on its own producer (beside
        the others'): a partition this replica lost meanwhile commits nothing."""
        now, valid = int(time.time() * 1000), self.folds.valid(self.folds.epoch)
        commits = []
        for tp, messages in batch.items():
            outs = [out for message in messages for out in self.decide(message, now)]
            offsets = {tp: messages[-1].offset + 1}
            commits.append(self.producers.commit(tp, outs, offsets, self.group, valid))
        await asyncio.gather(*commits)

    async def _take_over(self, consumer: AIOKafkaConsumer, assigned: list[TopicPartition]) -> None:
        """Fold the changelog of partitions just assigned (fenced and paused by the listener),
        then read their input from where it set them. Here, not in the listener: aiokafka sends
        no heartbeat while a listener runs, so a fold longer than the session lost the group."""
        self.pending = None
        try:
            async with self.folds.refold(self.producers):
                await self.rebuild(tp.partition for tp in assigned)
        except BaseException as exc:
            self.failed = exc  # deciding on a partial fold must not happen
            raise
        for tp in assigned:
            if tp in consumer.assignment() and tp in self.start:
                consumer.seek(tp, self.start[tp])
        consumer.resume(*[tp for tp in assigned if tp in consumer.assignment()])
        self.ready.set()

    def fold(self, message: Any, before_end: bool = True) -> None:
        kafka.fold_or_skip(self.name, message, self.logic.fold)

    async def rebuild(self, partitions: Iterable[int]) -> None:
        """Fold the changelog partitions to their ends before deciding anything new."""
        tps = [TopicPartition(self.changelog_topic, p) for p in partitions]
        if not tps:
            return
        reader = kafka.new_consumer(self.settings)
        try:
            await reader.start()
            ends = await kafka.read_to_end(reader, tps, self.fold)
            log.info("%s rebuilt %d partitions up to %s", self.name, len(tps), ends)
        finally:
            await reader.stop()


class _Rebuild(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, runner: TransactionalRunner, consumer: AIOKafkaConsumer) -> None:
        self.runner = runner
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        # A fresh fold for every assignment: state of partitions lost meanwhile must not linger.
        runner = self.runner
        try:
            async with runner.folds.refold(runner.producers):
                runner.logic.reset()
                # Fenced first: the changelog and the offsets read after it hold the old owner's last commit.
                runner.start = await runner.producers.fenced(self.consumer, assigned)
        except BaseException as exc:
            # aiokafka only logs a listener's failure; deciding on a partial fold must not happen.
            runner.failed = exc
            raise
        tps = list(assigned)
        if tps:  # nothing is decided until the run loop has folded their changelog
            self.consumer.pause(*tps)
            runner.folds.assigning = True
        runner.pending = tps
