"""The partitions of an engine's log that one replica owns: fenced, rebuilt, followed, handed over.

An engine's log is its input and its changelog at once (the queue engine's `queue` topic:
the gateway appends messages, the engine its decisions). Replicas of the engine share the
log's partitions through a consumer group. For each partition it is given, a replica:

1. starts the partition's transactional producer (`sumi.wire.fencing`): the previous owner's
   open transaction is aborted and its next commit fails, so nothing it decided after this
   point can land;
2. folds the partition from its start to the end offsets found then (read_committed, so
   including the previous owner's last commit), in a fresh state;
3. follows the partition from those ends, each offset folded once, and commits every
   decision about the partition's keys through the partition's own outbox.

Steps 2 and 3 begin in a task of their own, the partitions paused meanwhile: aiokafka sends
no heartbeat while a rebalance callback runs, so a fold longer than the group's session inside
it got the member dropped and the fold began again, for ever (seen at a million messages).

With snapshots (`sumi.engines.snapshots`), step 2 starts from the partition's latest snapshot
and folds only the log after it. A snapshot is taken where the state is exactly the fold of
the log before the offset it covers: right after a rebuild, and while following, at a moment
when every decision folded has committed (no outbox busy) and the partition has been read
past each offset those commits wrote. Before that moment the state holds decisions that lie
in the log after records it has not read yet. When one is due is `snapshot_due`: after enough
records folded (in proportion to the state), or once the partition went quiet.

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
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition

from sumi.core import allocator, ids
from sumi.core.config import Settings
from sumi.core.records import Record
from sumi.engines.snapshots import Snapshots
from sumi.wire import kafka
from sumi.wire.fencing import PartitionProducers
from sumi.wire.membership import Membership
from sumi.wire.outbox import Outbox
from sumi.wire.topics import partition_for

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

    def capture(self, partition: int, snapshot_id: str) -> tuple[Iterable[Record], int]:
        """The state of one owned partition as snapshot chunks, and how many items it holds
        (the chunks may be made while they are written, but hold the state of now)."""

    def restore(self, partition: int, chunks: list[Record]) -> None:
        """Put a snapshot of one partition into the (reset) state; raise if it is not one."""


class Partitions:
    def __init__(self, settings: Settings, name: str, topic: str, owner: Owner, snapshots: str = "") -> None:
        self.settings = settings
        self.name = name
        self.topic = topic
        self.owner = owner
        # `snapshots` names the engine's snapshot topic (<prefix>.<snapshots>.snapshots); "" = none.
        self.snapshots = Snapshots(settings, snapshots) if snapshots and settings.snapshot_records > 0 else None
        self.since: dict[int, int] = {}  # owned partition -> records folded since its snapshot
        self.folded_at: dict[int, float] = {}  # owned partition -> when it last folded a record
        self.taking: asyncio.Task[None] | None = None  # folding the partitions just assigned
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
        """The group member that follows the owned partitions (start it, then `subscribe`)."""
        self.member = kafka.group_member(self.settings, self.name, **options)
        return self.member

    def subscribe(self) -> None:
        assert self.member is not None
        Membership(self.name, self.member, self, on_failure=lambda _: self.failed.set()).subscribe(self.topic)

    async def revoked(self, revoked: list[TopicPartition]) -> None:
        if self.taking is not None:  # revoked while still folding them: nothing was decided
            self.taking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.taking
            self.taking = None
            await self._stop_writing()
            await self.producers.assign([])
            self.owner.reset()
        if not self.next:
            return
        self.next = {}  # nothing more is folded or delivered here
        try:
            await self.owner.drain()
        except Exception:
            log.exception("%s: draining the revoked partitions", self.name)
        await self._stop_writing()
        for p in list(self.outboxes):
            await self._close_outbox(p)
        await self.producers.assign([])
        self.owner.reset()

    async def assigned(self, tps: list[TopicPartition]) -> None:
        # A fold longer than the group's session (10 s) inside the callback got the member
        # dropped, and it folded again for ever: the fold runs in a task of its own, the
        # partitions paused until it is done (as Kafka Streams restores).
        await self.producers.assign(tps)  # the fence, before the fold reads what it left
        self.owner.reset()
        if tps:
            self.taking = asyncio.create_task(self._take_over(tps))

    async def _take_over(self, tps: list[TopicPartition]) -> None:
        assert self.member is not None
        try:
            ends = await self._rebuild(tps)
            allocator.give_back()  # the fold's garbage, not the state it left
            for tp in tps:  # the state is the fold of the log before `ends` now, exactly
                if self._due(tp.partition):
                    self._snapshot(tp.partition, ends[tp])
        except asyncio.CancelledError:
            raise
        except BaseException:
            # Deciding on a partial fold must not happen: the engine ends and starts afresh.
            log.exception("%s: taking over %s failed", self.name, [tp.partition for tp in tps])
            self.failed.set()
            return
        for tp in tps:
            self.member.seek(tp, ends[tp])
            producers = self.producers.turns_of(tp.partition)
            self.outboxes[tp.partition] = outbox = Outbox(producers, self.settings.partitions)
            self.tasks[tp.partition] = asyncio.create_task(self._run_outbox(outbox))
        self.next = {tp.partition: ends[tp] for tp in tps}  # no await since the seeks: nothing slips past
        self.member.resume(*tps)
        self.taking = None
        log.info("%s owns partitions %s", self.name, sorted(self.next))
        self.owner.adopted()

    async def _rebuild(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        reader = kafka.new_consumer(self.settings, max_partition_fetch_bytes=4 << 20)
        await reader.start()
        try:
            starts = await self._restore(reader, tps)
            self.since = {tp.partition: 0 for tp in tps}

            def fold(m: Any, before_end: bool) -> None:
                if before_end:  # past the end is the follower's, from the ends on
                    self.since[m.partition] += 1
                    self.owner.fold(m, True)

            return await kafka.read_to_end(reader, tps, fold, starts=starts)
        finally:
            await reader.stop()

    async def _restore(self, reader: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's latest snapshot into the state; where to fold the log from."""
        if self.snapshots is None or not tps:
            return {}
        if self.snapshots.producer is None:
            await self.snapshots.start()
        reader.assign(tps)
        ends = await reader.end_offsets(tps)
        starts: dict[TopicPartition, int] = {}
        for tp in tps:
            try:
                snapshot = await self.snapshots.latest(tp.partition)
            except Exception:  # a snapshot only saves time: without one, the fold starts at 0
                log.exception("%s: reading the snapshot of partition %d failed", self.name, tp.partition)
                continue
            if snapshot is None:
                continue
            if snapshot.header.covers > ends[tp]:
                log.warning("%s: the snapshot of partition %d is past its log's end", self.name, tp.partition)
                continue
            try:
                for chunk in snapshot.chunks:  # a chunk at a time: the loop (heartbeats) goes on between
                    self.owner.restore(tp.partition, [chunk])
                    await asyncio.sleep(0)
            except Exception:
                log.exception("%s: restoring partition %d failed; folding every partition", self.name, tp.partition)
                self.owner.reset()
                return {}
            starts[tp] = snapshot.header.covers
            self.snapshots.restored(tp.partition, snapshot.header.entries)
        log.info("%s: restored %d snapshots, folding the log after them", self.name, len(starts))
        return starts

    # ---- snapshots -----------------------------------------------------------------------------

    def _due(self, partition: int) -> bool:
        if self.snapshots is None:
            return False
        quiet_for = asyncio.get_running_loop().time() - self.folded_at.get(partition, 0.0)
        return self.snapshots.due(partition, self.since.get(partition, 0), quiet_for)

    def _quiet(self, partition: int) -> bool:
        """Whether the state is the fold of the partition's log up to where it has been read."""
        if any(o.busy for o in self.outboxes.values()):
            return False
        written = max((o.written.get((self.topic, partition), -1) for o in self.outboxes.values()), default=-1)
        return self.next.get(partition, -1) > written

    def _snapshot(self, partition: int, covers: int) -> None:
        assert self.snapshots is not None
        snapshot_id = ids.new_ulid()
        chunks, entries = self.owner.capture(partition, snapshot_id)  # now: the next fold changes it
        self.since[partition] = 0
        self.snapshots.write_soon(partition, covers, snapshot_id, chunks, entries)

    def _snapshot_quiet(self) -> None:
        for p in list(self.next):
            if self._due(p) and self._quiet(p):
                self._snapshot(p, self.next[p])

    async def _stop_writing(self) -> None:
        if self.snapshots is not None:
            await self.snapshots.stop_writing()

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
                now = asyncio.get_running_loop().time()
                for tp, messages in batch.items():
                    for m in messages:
                        at = self.next.get(tp.partition)
                        if at is None or m.offset < at:
                            continue  # not owned (any more), or folded already
                        self.next[tp.partition] = m.offset + 1
                        self.since[tp.partition] = self.since.get(tp.partition, 0) + 1
                        self.folded_at[tp.partition] = now
                        self.owner.fold(m, False)
                        folded = True
                if self.snapshots is not None:
                    # Before the batch's decisions change the state; on an empty poll too, so a
                    # partition that went quiet while its last snapshot was written gets one.
                    self._snapshot_quiet()
                if folded:
                    after_batch()
        finally:
            failed.cancel()
        raise RuntimeError(f"{self.name}: a commit failed; the state is rebuilt from the log")

    async def close(self) -> None:
        if self.taking is not None:
            self.taking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.taking
        await self._stop_writing()
        if self.snapshots is not None:
            await self.snapshots.stop()
        for p in list(self.outboxes):
            task = self.tasks.pop(p)
            self.outboxes.pop(p)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.producers.close()
