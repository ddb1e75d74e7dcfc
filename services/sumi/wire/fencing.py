"""One transactional producer per input partition a replica holds: how replicas fence each other.

A consume–decide–produce processor commits its outputs and its group offsets in one Kafka
transaction. With one transactional ID per process, a second replica could not fence the
first: a replica the group had given up on (paused, cut off) could still commit outputs for
partitions now decided by another. So the transactional ID belongs to the input partition,
`<prefix>-<name>-p<partition>` (Kafka's own pattern before KIP-447, which aiokafka does not
speak): starting the producer of a partition aborts the open transaction of whichever
replica held it before and makes its next commit fail (`ProducerFenced`), which ends that
process. Only then does the new owner read the partition's committed offset (`fenced`), so
no commit of the old owner can land between that read and the first decision.

A partition's engine outbox takes turns on a pair of producers (`turns=2`, see
`sumi.wire.outbox`), `...-p<partition>` and `...-p<partition>-t1`: the new owner starts both,
so both of the old owner's are fenced before it reads anything.

Rebalances under aiokafka's eager protocol revoke everything and assign anew: producers of
partitions assigned again are kept, the others stopped.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sumi.core.config import Settings
from sumi.wire import kafka

log = logging.getLogger(__name__)


def transactional_id(settings: Settings, name: str, partition: int, turn: int = 0) -> str:
    base = f"{settings.topic_prefix}-{name}-p{partition}"
    return f"{base}-t{turn}" if turn else base


class PartitionProducers:
    def __init__(self, settings: Settings, name: str, turns: int = 1, **options: Any) -> None:
        self.settings = settings
        self.name = name
        self.turns = turns
        self.options = options
        self.producers: dict[int, tuple[AIOKafkaProducer, ...]] = {}
        self.locks: dict[int, asyncio.Lock] = {}  # one transaction at a time per partition

    def get(self, tp: TopicPartition) -> AIOKafkaProducer | None:
        turns = self.producers.get(tp.partition)
        return turns[0] if turns else None

    def turns_of(self, partition: int) -> tuple[AIOKafkaProducer, ...]:
        """Every producer of a held partition, for an outbox that takes turns on them."""
        return self.producers[partition]

    def lock(self, partition: int) -> asyncio.Lock:
        return self.locks.setdefault(partition, asyncio.Lock())

    async def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Hold exactly these partitions: new ones fenced from their previous owner, lost ones let
        go. Called with no transaction running (inside `quiet`, or once the commits have ended)."""
        wanted = {tp.partition for tp in tps}
        for p in sorted(set(self.producers) - wanted):
            await self._stop(p)
        for p in sorted(wanted - set(self.producers)):
            started: list[AIOKafkaProducer] = []
            try:
                for turn in range(self.turns):
                    tid = transactional_id(self.settings, self.name, p, turn)
                    producer = kafka.new_producer(self.settings, tid, **self.options)
                    await producer.start()  # InitProducerId: the fence
                    started.append(producer)
            except BaseException:
                for producer in started:
                    with contextlib.suppress(Exception):
                        await producer.stop()
                raise
            self.producers[p] = tuple(started)

    async def fenced(self, consumer: AIOKafkaConsumer, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Fence these partitions, then their committed offsets (0: none), and seek there."""
        tps = list(tps)
        await self.assign(tps)
        offsets = {tp: await consumer.committed(tp) or 0 for tp in tps}
        for tp, offset in offsets.items():
            consumer.seek(tp, offset)
        return offsets

    @contextlib.asynccontextmanager
    async def quiet(self) -> AsyncIterator[None]:
        """No transaction runs inside: a rebalance folds the changelog only after the last
        commit of the state it drops (its decisions would be missing from the new fold)."""
        async with contextlib.AsyncExitStack() as held:
            for p in sorted(self.producers):
                await held.enter_async_context(self.lock(p))
            yield

    async def commit(
        self,
        tp: TopicPartition,
        outs: list[kafka.Out],
        offsets: dict[TopicPartition, int],
        group: str,
        valid: Callable[[], bool] = lambda: True,
    ) -> bool:
        """One transaction on the partition's own producer. False, and nothing committed, if
        this replica no longer holds the partition or `valid` says the decisions are stale
        (decided against a state a rebalance has dropped meanwhile)."""
        async with self.lock(tp.partition):
            producer = self.get(tp)
            if producer is None or not valid():
                return False
            await kafka.commit(producer, outs, self.settings.partitions, offsets, group)
            return True

    async def _stop(self, partition: int) -> None:
        # No lock taken: a rebalance calls this inside `quiet`, after the partition's last commit.
        for producer in self.producers.pop(partition):
            try:
                await producer.stop()
            except Exception:
                log.exception("%s: stopping a producer of partition %d", self.name, partition)

    async def close(self) -> None:
        for p in sorted(self.producers):
            await self._stop(p)


class Folds:
    """Which fold a replica's decisions were made against.

    aiokafka may hand out records fetched before or while a rebalance's listener folded afresh,
    and a decision in flight across a rebalance was made against the state it dropped. So the
    epoch is bumped when an assignment starts and when it ends: a record of an older fold is
    never taken, and a decision of one is never committed (`valid`, checked under the
    partition's lock in `PartitionProducers.commit`)."""

    def __init__(self) -> None:
        self.epoch = 0
        self.assigning = False

    def stale(self, epoch: int) -> bool:
        return self.epoch != epoch or self.assigning

    def valid(self, epoch: int) -> Callable[[], bool]:
        return lambda: not self.stale(epoch)

    @contextlib.asynccontextmanager
    async def refold(self, producers: PartitionProducers) -> AsyncIterator[None]:
        """An assignment's fold: after the last commit of the state it drops (`quiet`), and
        stale for every decision made before it or while it runs."""
        self.assigning = True
        self.epoch += 1
        try:
            async with producers.quiet():
                yield
        finally:
            self.epoch += 1
            self.assigning = False
