"""The partitions of an engine's log that one replica owns: fenced, rebuilt, followed, handed over.

An engine's log is its input and its changelog at once (the queue engine's `queue` topic:
the gateway appends messages, the engine its decisions). Replicas of the engine share the
log's partitions through a consumer group. For each partition it is given, a replica:

1. starts the partition's transactional producer (`sumi.core.fencing`): the previous owner's
   open transaction is aborted and its next commit fails, so nothing it decided after this
   point can land;
2. folds the partition from its start to the end offsets found then (read_committed, so
   including the previous owner's last commit), in a fresh state;
3. follows the partition from those ends, each offset folded once, and commits every
   decision about the partition's keys through the partition's own outbox.

On revocation the owner stops its work there (the engine's `drain`: runtime contexts stopped
and their ends committed) before it returns, which Kafka waits for before any replica is
given the partitions; then its outboxes and producers go and its state is dropped. aiokafka
speaks the eager protocol, so every rebalance revokes every partition and assigns anew: the
engine folds its partitions again each time (a stop-the-world rebalance, as Kafka Streams
did before KIP-429).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from sumi.core import allocator, kafka
from sumi.core.config import Settings
from sumi.core.fencing import PartitionProducers
from sumi.core.outbox import Outbox
from sumi.core.topics import partition_for

log = logging.getLogger(__name__)


class Owner(Protocol):
    """What an engine plugs into its partitions."""

    def reset(self) -> None:
        """Forget the state of every partition: a new assignment is folded afresh."""

    def fold(self, message: Any, rebuilding: bool) -> None:
        """One record of an owned partition: while rebuilding every record, after it what is new."""

    async def drain(self) -> None:
        """Stop the work on the owned partitions and commit its ends, before they are handed over."""

    def adopted(self) -> None:
        """The assigned partitions are folded and followed: take up their work."""


class Partitions(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka is untyped
    def __init__(self, settings: Settings, name: str, topic: str, owner: Owner) -> None:
        self.settings = settings
        self.name = name
        self.topic = topic
        self.owner = owner
        self.producers = PartitionProducers(settings, name, turns=2, linger_ms=0)
        self.outboxes: dict[int, Outbox] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.next: dict[int, int] = {}  # owned partition -> the next offset to fold
        self.member: AIOKafkaConsumer | None = None
        self.failed = asyncio.Event()  # an outbox failed: the engine ends (state is rebuilt from the log)

    # ---- the decisions' side -------------------------------------------------------------------

    def of(self, key: str) -> int:
        return partition_for(key, self.settings.partitions)

    def owns(self, key: str) -> bool:
        return self.of(key) in self.next

    @property
    def owned(self) -> frozenset[int]:
        return frozenset(self.next)

    def outbox(self, key: str) -> Outbox | None:
        """The outbox that commits decisions about `key` (None: not this replica's)."""
        return self.outboxes.get(self.of(key))

    # ---- the group -----------------------------------------------------------------------------

    def consumer(self, **options: Any) -> AIOKafkaConsumer:
        """The group member that follows the owned partitions (subscribe it with `self`)."""
        self.member = kafka.group_member(self.settings, self.name, **options)
        return self.member

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        if not self.next:
            return
        self.next = {}  # nothing more is folded or delivered here
        try:
            await self.owner.drain()
        except Exception:
            log.exception("%s: draining the revoked partitions", self.name)
        for p in list(self.outboxes):
            await self._close_outbox(p)
        await self.producers.assign([])
        self.owner.reset()

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        tps = sorted(assigned)
        try:
            await self.producers.assign(tps)  # the fence, before the fold reads what it left
            self.owner.reset()
            ends = await self._rebuild(tps)
            allocator.give_back()  # the fold's garbage, not the state it left
        except BaseException as exc:
            # aiokafka only logs a listener's failure; deciding on a partial fold must not happen.
            log.exception("%s: taking over %s failed", self.name, [tp.partition for tp in tps])
            self.failed.set()
            raise exc
        assert self.member is not None
        for tp in tps:
            self.member.seek(tp, ends[tp])
            producers = self.producers.turns_of(tp.partition)
            self.outboxes[tp.partition] = outbox = Outbox(producers, self.settings.partitions)
            self.tasks[tp.partition] = asyncio.create_task(self._run_outbox(outbox))
        self.next = {tp.partition: ends[tp] for tp in tps}  # no await since the seeks: nothing slips past
        log.info("%s owns partitions %s", self.name, sorted(self.next))
        self.owner.adopted()

    async def _rebuild(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        reader = kafka.new_consumer(self.settings, max_partition_fetch_bytes=4 << 20)
        await reader.start()
        try:
            return await kafka.read_to_end(reader, tps, lambda m, before: self.owner.fold(m, True))
        finally:
            await reader.stop()

    async def _run_outbox(self, outbox: Outbox) -> None:
        try:
            await outbox.run()
        except asyncio.CancelledError:
            raise
        except BaseException:
            log.exception("%s: a commit failed", self.name)
            self.failed.set()

    async def _close_outbox(self, partition: int) -> None:
        outbox, task = self.outboxes.pop(partition), self.tasks.pop(partition)
        await outbox.idle()  # the drain's last commits
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # ---- following -----------------------------------------------------------------------------

    async def follow(self, after_batch: Callable[[], None]) -> None:
        """Fold each new record of the owned partitions once, until an outbox fails."""
        assert self.member is not None
        failed = asyncio.create_task(self.failed.wait())
        try:
            while not failed.done():
                batch = await self.member.getmany(timeout_ms=1000, max_records=5000)
                folded = False
                for tp, messages in batch.items():
                    for m in messages:
                        at = self.next.get(tp.partition)
                        if at is None or m.offset < at:
                            continue  # not owned (any more), or folded already
                        self.next[tp.partition] = m.offset + 1
                        self.owner.fold(m, False)
                        folded = True
                if folded:
                    after_batch()
        finally:
            failed.cancel()
        raise RuntimeError(f"{self.name}: a commit failed; the state is rebuilt from the log")

    async def close(self) -> None:
        for p in list(self.outboxes):
            task = self.tasks.pop(p)
            self.outboxes.pop(p)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.producers.close()
