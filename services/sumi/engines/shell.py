"""The engine shell: one consume -> decide -> produce loop in Kafka transactions, for any processor.

A processor (`Processor`) supplies its fold and its decisions; the shell owns the rest. It
holds the partitions of the input topic that the consumer group gives it; any number of
replicas share them. Each partition has a transactional producer of its own
(`sumi.wire.fencing`), started before the partition's committed offset is read, so a replica
that lost a partition can commit nothing for it after. The processor's state for a partition
is folded before any input of that partition is decided: from the same partition of its
changelog topic, read to the end (read_committed), or, for a processor whose input is its own
changelog (the verifier reads the control log), from the input's beginning, deciding only
what comes from the committed offset on. Every assignment folds afresh, so the state of a
partition revoked meanwhile is dropped.

Each polled batch is decided and produced in one transaction per partition together with its
input offset (send_offsets_to_transaction), so outputs, state and progress commit together or
not at all. A decision may instead be an effect (the verifier loading a module) that runs
beside the loop, in the shell's one TaskGroup, and commits its outputs when it ends; until
then the partition's group offset stays at it, so a restart decides it again.

A processor that serves what it holds beyond its input (`Serving`: the workflow engine runs
its instances' contexts) gets, per assignment, a generation in that TaskGroup: what it reads
beside its changelog (`prepare`), the changelog's fold (its latest snapshots restored first,
`sumi.engines.checkpoints`, and only the log after them folded), an outbox per partition on the
partition's fenced producers, then its input records (`take`) and `serve` until the partitions
are revoked. A revocation returns only once the generation has ended, its runtime contexts
proven stopped, and what its stop decided committed: Kafka hands the partitions on only after
that, so no context of them runs while another replica runs the same instance. Such a processor
decides on its outboxes and commits its input's progress itself (a decision may wait on a
context's stop). One whose changelog is its input, appended to by others too (the queue
engine's log), is handed the fold's records by `take` as well, before `serve`, and then each
later record once, from the fold's end on (its group offsets mean nothing); its snapshots cover
only what it has read (`sumi.engines.checkpoints`).

An input record that does not decode, or whose handling raises, is quarantined in that same
transaction and the processor goes on with the next one. A bad record in the changelog is
skipped by the fold (the projection of that topic quarantined it when it met it). Any other
error (Kafka, a failed transaction) ends the process: state is only ever rebuilt from the
log, never patched up.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from aiokafka import AIOKafkaConsumer, TopicPartition

from sumi.core import allocator
from sumi.core.config import Settings
from sumi.engines.checkpoints import Checkpoints, Snapshotted
from sumi.wire import assignors, kafka
from sumi.wire.fencing import Folds, PartitionProducers
from sumi.wire.kafka import Out
from sumi.wire.membership import Membership
from sumi.wire.outbox import Box, Outbox

log = logging.getLogger(__name__)

Decided = Iterable[Out] | Awaitable[Iterable[Out]]


class Folding(Protocol):
    def reset(self) -> None:
        """Forget all state: a new assignment is folded afresh."""

    def fold(self, record: Any, key: str) -> None:
        """Apply one changelog record (its key `key`) to the state."""


class Processor(Folding, Protocol):
    def decide(self, record: Any, now: int) -> Decided:
        """Decide one input record: its outputs, or an effect whose outputs commit when it ends.
        Fold what it emits to the changelog itself.

        If it raises, it must have left the state as it was (decide first, then fold)."""


@runtime_checkable
class Serving(Folding, Snapshotted, Protocol):
    """A processor that serves its partitions beyond deciding its input, on outboxes of its own."""

    async def prepare(self, partitions: frozenset[int], stack: contextlib.AsyncExitStack) -> None:
        """Before its changelog is folded: what else it reads and needs, kept open on `stack`."""

    def serve(self, outboxes: dict[int, Box]) -> Awaitable[None]:
        """Take the outboxes, ready to decide (before any input is handed over); the awaitable
        serves until cancelled, and on cancellation stops every runtime context, proven, first."""

    def take(self, message: Any) -> None:
        """One input record of a partition being served (of its changelog's fold too, before
        `serve`, for a processor whose changelog is its input)."""


@dataclass
class Progress:
    """Per partition: the offset after the last record read, and the effects still running.
    The group offset to commit is the oldest running effect's, else the next unread."""

    read: dict[TopicPartition, int] = field(default_factory=dict)
    running: dict[TopicPartition, set[int]] = field(default_factory=dict)

    def at(self, tp: TopicPartition) -> int | None:
        end = self.read.get(tp)
        return None if end is None else min(self.running.get(tp) or {end})


class Shell:
    def __init__(
        self,
        settings: Settings,
        name: str,
        input_topic: str,
        processor: Processor | Serving,
        changelog_topic: str | None = None,
        one_owner: bool = False,
        turns: int = 1,
        snapshots: str | None = None,
        **options: Any,
    ) -> None:
        self.settings = settings
        self.name = name
        self.input_topic = input_topic
        # None: the input is its own changelog, folded from its beginning at each assignment.
        self.changelog_topic = changelog_topic
        self.own_log = changelog_topic == input_topic  # a Serving processor's: others append to it too
        self.processor = processor
        self.serves = processor if isinstance(processor, Serving) else None
        self.decides = None if isinstance(processor, Serving) else processor
        self.group = f"{settings.topic_prefix}-{name}"
        self.producers = PartitionProducers(settings, name, turns=turns, linger_ms=0)
        self.options = options  # the group member's
        # The changelog's snapshots (`snapshots`: the engine whose snapshot topic they are on),
        # taken when the outboxes are idle: a Serving processor's.
        self.checkpoints = (
            Checkpoints(settings, snapshots, changelog_topic, self.serves, shared=self.own_log)
            if snapshots is not None and changelog_topic is not None and self.serves is not None
            else None
        )
        self.serving: frozenset[int] = frozenset()  # the partitions a Serving processor's generation serves
        self.generation: asyncio.Task[None] | None = None
        self.one_owner = one_owner  # decisions span partitions: one replica holds all, the rest stand by
        self.quarantine = kafka.Quarantine(settings, name)
        self.ready = asyncio.Event()
        self.failed: BaseException | None = None
        self.failing = asyncio.Event()  # set with `failed`
        self.folds = Folds()
        self.progress = Progress()
        # The committed offsets the last assignment found (its own log's: the next offset to take).
        self.start: dict[TopicPartition, int] = {}
        self.pending: list[TopicPartition] | None = None  # assigned, fenced, not folded yet
        self.consumer: AIOKafkaConsumer | None = None

    async def run(self) -> None:
        kafka.shorten_txn_retry()  # a command's decision waits on this processor's commit
        consumer = kafka.group_member(self.settings, self.name, **self._assignor(), **self.options)
        try:  # started inside: a stop signal while they start still stops them (unstopped clients log errors)
            await consumer.start()
            self.consumer = consumer
            if self.checkpoints is not None:
                await self.checkpoints.start()
            Membership(self.name, consumer, self, on_failure=self._fail).subscribe(self.input_topic)
            # Effects and generations too: a failed commit, or a generation's failure, ends the loop.
            async with asyncio.TaskGroup() as tasks:
                epoch = self.folds.epoch
                async for batch in kafka.batches(consumer, timeout_ms=500, max_records=500):
                    if self.failed is not None:
                        raise RuntimeError("taking partitions over failed") from self.failed
                    if self.pending is not None:  # an assignment to fold, outside its callback
                        await self._take_over(consumer, self.pending, tasks)
                    # aiokafka may hand out records fetched before or while the listener folded;
                    # deciding them would use the wrong state. Read on from where the fold left.
                    if batch and self.folds.stale(epoch):
                        await self._rewind(consumer, list(batch))
                    elif batch and self.serves is not None:
                        self._hand_over(self.serves, batch)
                    elif batch:
                        await self._process(batch, tasks)
                    epoch = self.folds.epoch  # for the next poll
        finally:
            await consumer.stop()
            if self.checkpoints is not None:
                await self.checkpoints.stop()
            await self.producers.close()

    def _fail(self, exc: BaseException) -> None:
        self.failed = exc  # deciding on a partial fold must not happen
        self.failing.set()

    async def revoked(self, tps: list[TopicPartition]) -> None:
        # Each assignment folds afresh and a revoked partition's commits are fenced by its new
        # owner; what must end before the partitions go is a generation's contexts (the drain).
        self.serving = frozenset()
        task, self.generation = self.generation, None
        if task is not None and not task.done():
            task.remove_done_callback(self._ended)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _ended(self, task: "asyncio.Task[None]") -> None:
        """A generation ended while its partitions were still held (a revocation removes this
        callback before it cancels one): a failure, even one that ended cancelled from within,
        for its partitions would otherwise stay here, read and never decided."""
        if task.cancelled():
            self._fail(RuntimeError(f"{self.name}: a generation was cancelled from within"))
        else:
            self._fail(task.exception() or RuntimeError(f"{self.name}: a generation ended by itself"))

    async def assigned(self, tps: list[TopicPartition]) -> None:
        # A fresh fold for every assignment: state of partitions lost meanwhile must not linger.
        assert self.consumer is not None
        async with self.folds.refold(self.producers):
            self.processor.reset()
            self.progress = Progress()
            # Fenced first: the changelog and the offsets read after it hold the old owner's last commit.
            self.start = await self.producers.fenced(self.consumer, tps)
        if tps and self.serves is None:  # nothing is decided until the run loop has folded their changelog
            self.folds.assigning = True  # (a generation is handed records only once it serves)
        self.pending = tps

    def _assignor(self) -> dict[str, Any]:
        if not self.one_owner:
            return {}
        return {"partition_assignment_strategy": (assignors.one_owner(lambda: bool(self.producers.producers)),)}

    def take(self, message: Any, now: int) -> list[Out] | Awaitable[Iterable[Out]]:
        """One input record's outputs, its effect, or its quarantine: never an exception."""
        record = kafka.decode(message.value)
        if isinstance(record, kafka.Rejected):
            return [self.quarantine.out(message, record, now)]
        assert self.decides is not None
        try:
            if self.changelog_topic is None:
                self.decides.fold(record, message.key.decode() if message.key else "")
            decided = self.decides.decide(record, now)
            return decided if isinstance(decided, Awaitable) else list(decided)
        except Exception as exc:
            log.exception("%s could not handle %s[%d]@%d", self.name, message.topic, message.partition, message.offset)
            return [self.quarantine.out(message, kafka.failed(exc), now)]

    async def _process(self, batch: dict[TopicPartition, list[Any]], effects: asyncio.TaskGroup) -> None:
        """Each partition's records decided in order, committed on its own producer (beside
        the others'): a partition this replica lost meanwhile commits nothing."""
        now, epoch, progress = int(time.time() * 1000), self.folds.epoch, self.progress
        commits = []
        for tp, messages in batch.items():
            outs: list[Out] = []
            for message in messages:
                progress.read[tp] = message.offset + 1
                if self.changelog_topic is None and message.offset < self.start.get(tp, 0):
                    self.fold(message)  # decided before: only folded
                    continue
                got = self.take(message, now)
                if isinstance(got, list):
                    outs += got
                else:
                    progress.running.setdefault(tp, set()).add(message.offset)
                    effects.create_task(self._effect(tp, message, got, progress, epoch))
            offsets = self._offsets(tp)
            if outs or offsets:
                commits.append(self.producers.commit(tp, outs, offsets, self.group, self.folds.valid(epoch)))
        await asyncio.gather(*commits)

    async def _effect(
        self, tp: TopicPartition, message: Any, effect: Awaitable[Iterable[Out]], progress: Progress, epoch: int
    ) -> None:
        """An effect's outputs, or its quarantine, committed as soon as it ends, in whatever order
        effects end. One of an older fold, or of a partition lost meanwhile, commits nothing: the
        partition's owner decides the record again from the committed offset."""
        try:
            outs = list(await effect)
        except Exception as exc:
            log.exception("%s skips %s[%d]@%d", self.name, message.topic, message.partition, message.offset)
            outs = [self.quarantine.out(message, kafka.failed(exc))]
        progress.running.get(tp, set()).discard(message.offset)
        await self.producers.commit(tp, outs, self._offsets(tp), self.group, self.folds.valid(epoch))

    def _offsets(self, tp: TopicPartition) -> dict[TopicPartition, int]:
        # never behind the committed offset: a partition folded again from its start is below it
        at = self.progress.at(tp)
        return {tp: at} if at is not None and at >= self.start.get(tp, 0) else {}

    async def _take_over(
        self, consumer: AIOKafkaConsumer, assigned: list[TopicPartition], tasks: asyncio.TaskGroup
    ) -> None:
        """Fold the changelog of partitions just assigned (fenced and paused by the listener),
        then read their input from where the fold left. Here, not in the listener: aiokafka sends
        no heartbeat while a listener runs, so a fold longer than the session lost the group."""
        self.pending = None
        if self.serves is not None:
            if assigned:  # else this replica stands by, serving nothing
                self.generation = tasks.create_task(self._generation(self.serves, consumer, assigned))
                self.generation.add_done_callback(self._ended)
            return
        try:
            async with self.folds.refold(self.producers):
                await self.rebuild(tp.partition for tp in assigned)
        except BaseException as exc:
            self._fail(exc)
            raise
        held = [tp for tp in assigned if tp in consumer.assignment()]
        await self._rewind(consumer, held)
        consumer.resume(*held)
        self.ready.set()

    async def _generation(self, processor: Serving, consumer: AIOKafkaConsumer, assigned: list[TopicPartition]) -> None:
        """A Serving processor's partitions: prepared, folded, then served until revoked."""
        partitions = frozenset(tp.partition for tp in assigned)
        async with contextlib.AsyncExitStack() as stack:
            await processor.prepare(partitions, stack)
            await self.rebuild(partitions)
            outboxes: dict[int, Box] = {
                p: Outbox(self.producers.turns_of(p), self.settings.partitions) for p in sorted(partitions)
            }
            for box in outboxes.values():
                box.on_idle = self.checkpoints.idle if self.checkpoints is not None else None
            if self.checkpoints is not None:
                stack.callback(self.checkpoints.watch(list(outboxes.values())))
            held = [tp for tp in assigned if tp in consumer.assignment()]
            await self._rewind(consumer, held)
            serving = processor.serve(outboxes)  # no await from here until its task holds it
            self.serving = partitions
            consumer.resume(*held)
            self.ready.set()
            log.info("%s serves partitions %s", self.name, sorted(partitions))
            # A TaskGroup: one failure (a fenced producer above all) cancels every other loop at once.
            async with asyncio.TaskGroup() as tasks:
                for box in outboxes.values():
                    tasks.create_task(box.run())
                try:
                    await serving
                finally:  # what its stop decided (a queue batch's end) commits before the partitions go
                    for box in outboxes.values():
                        await box.idle()

    def _hand_over(self, processor: Serving, batch: dict[TopicPartition, list[Any]]) -> None:
        # A record of a partition not served (yet) was fetched before its take-over: once
        # served, it is read again from the committed offset.
        for tp, messages in batch.items():
            if tp.partition not in self.serving:
                continue
            for message in messages:
                if self.own_log:  # each once, from the fold's end on
                    if message.offset < self.start[tp]:
                        continue
                    self.start[tp] = message.offset + 1
                processor.take(message)
            if self.own_log and self.checkpoints is not None:
                self.checkpoints.read(tp.partition, self.start[tp])

    async def _rewind(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        """Read on from where the last assignment's fold left these partitions."""
        held = [tp for tp in tps if tp in consumer.assignment() and tp in self.start]
        if self.changelog_topic is None:
            if held:
                await consumer.seek_to_beginning(*held)
            return
        for tp in held:
            consumer.seek(tp, self.start[tp])

    def fold(self, message: Any, before_end: bool = True) -> None:
        key = message.key.decode() if message.key else ""
        kafka.fold_or_skip(self.name, message, lambda record: self.processor.fold(record, key))

    def _fold_own(self, message: Any, before_end: bool) -> None:
        # Its records carry their positions into the fold (the queue engine reads bodies back by
        # them); what lies past the end is taken when the input is read on from there.
        if before_end:
            assert self.serves is not None
            self.serves.take(message)

    async def rebuild(self, partitions: Iterable[int]) -> None:
        """Fold the changelog partitions to their ends before deciding anything new: after
        their latest snapshots, where there are any."""
        if self.changelog_topic is None:
            return  # folded from the input itself, as the loop reads it
        tps = [TopicPartition(self.changelog_topic, p) for p in partitions]
        if not tps:
            return
        starts = await self.checkpoints.restore(tps) if self.checkpoints is not None else {}
        reader = kafka.new_consumer(self.settings, max_partition_fetch_bytes=4 << 20)
        try:
            await reader.start()
            ends = await kafka.read_to_end(reader, tps, self._fold_own if self.own_log else self.fold, starts=starts)
            log.info("%s rebuilt %d partitions up to %s", self.name, len(tps), ends)
        finally:
            await reader.stop()
        if self.own_log:
            self.start.update(ends)  # the input is taken on from here
        allocator.give_back()  # the fold's garbage, not the state it left
        if self.checkpoints is not None:
            self.checkpoints.rebuilt(ends)
