"""Partitions shared by a group, each assignment served by a fresh generation of an engine.

An engine whose input is a command topic and whose changelog is another log keyed alike (the
workflow engine: `workflow.commands` in, the instance log out, partition N of one holding the
same keys as partition N of the other) shares both among its replicas through a consumer
group on the input. For each assignment a replica:

1. starts a transactional producer pair per assigned partition (`sumi.wire.fencing`): the
   previous owner's open transactions are aborted and its next commit fails;
2. runs a generation: the engine rebuilds the state of exactly those partitions from their
   snapshots and changelog (after the fence, so the old owner's last commit is in it), then
   says it is ready; only then are the input partitions resumed, and each command read is
   handed to that generation;
3. on revocation ends the generation before it returns: the engine stops its runtime
   contexts and proves them stopped, commits what it decided and lets its producers go.
   Kafka hands partitions on only once every member has returned from its revocation, so no
   context of a revoked partition runs while another replica runs the same instance; a
   replica the group gave up on is fenced by its successor's producers.

aiokafka speaks the eager protocol, so every rebalance revokes every partition and assigns
anew: each one is a new generation that rebuilds its partitions (bounded by the snapshots).
The rebuild runs in a task of its own with the partitions paused, since aiokafka sends no
heartbeat while a rebalance callback runs (see `sumi.engines.partitions`).
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka import TopicPartition

from sumi.core.config import Settings
from sumi.wire import kafka
from sumi.wire.fencing import PartitionProducers
from sumi.wire.membership import Membership

log = logging.getLogger(__name__)


class Generation(Protocol):
    """What an engine plugs into the shares."""

    async def generation(self, owned: frozenset[int], producers: PartitionProducers, ready: Callable[[], None]) -> None:
        """Rebuild the owned partitions, call `ready`, serve until cancelled; on cancellation
        stop every runtime context of them, proven, before returning."""

    def take(self, message: Any) -> None:
        """One input record of an owned partition, once the generation is ready."""

    def after_batch(self) -> None:
        """A batch of input records was taken."""


class Shares:
    def __init__(self, settings: Settings, name: str, topic: str, engine: Generation, **options: Any) -> None:
        self.name = name
        self.topic = topic
        self.engine = engine
        self.producers = PartitionProducers(settings, name, turns=2, linger_ms=0)
        self.consumer = kafka.group_member(settings, name, **options)
        self.membership = Membership(name, self.consumer, self, on_failure=self._fail)
        self.owned: frozenset[int] = frozenset()
        self.live = False  # the current generation is ready: input is handed to it
        self.task: asyncio.Task[None] | None = None
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def revoked(self, tps: list[TopicPartition]) -> None:
        await self._end()

    async def assigned(self, tps: list[TopicPartition]) -> None:
        if not tps:
            log.info("%s: this replica owns no partition of %s", self.name, self.topic)
            return
        await self.producers.assign(tps)  # the fence, before the rebuild reads what it left
        self.owned = frozenset(tp.partition for tp in tps)

        def ready() -> None:
            self.live = True
            self.consumer.resume(*tps)
            log.info("%s owns partitions %s", self.name, sorted(self.owned))

        self.task = asyncio.create_task(self.engine.generation(self.owned, self.producers, ready))
        self.task.add_done_callback(self._ended)

    def _ended(self, task: "asyncio.Task[None]") -> None:
        """A generation ended while it still owned its partitions (`_end` removes this callback
        before it cancels one): a failure, even when it ended cancelled, for a CancelledError
        raised inside it (not by `_end`) would otherwise leave the partitions read and undecided."""
        try:
            exc = task.exception()
        except asyncio.CancelledError as cancelled:  # not a stop: the process must end, not exit 0
            log.error(
                "%s: the generation of %s was cancelled from within", self.name, sorted(self.owned), exc_info=cancelled
            )
            exc = RuntimeError(f"{self.name}: a generation was cancelled from within")
        self._fail(exc if exc is not None else RuntimeError(f"{self.name}: a generation ended by itself"))

    def _fail(self, exc: BaseException) -> None:
        if not self.failed.done():
            self.failed.set_exception(exc)

    async def _end(self) -> None:
        """The current generation stops (its contexts proven stopped) and its producers go."""
        self.live = False
        task, self.task = self.task, None
        if task is not None and not task.done():
            task.remove_done_callback(self._ended)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.owned = frozenset()
        await self.producers.assign([])

    async def run(self) -> None:
        """Follow the owned input partitions until a generation fails (the error is raised)."""
        await self.consumer.start()
        self.membership.subscribe(self.topic)
        while True:
            fetch = asyncio.ensure_future(self.consumer.getmany(timeout_ms=1000, max_records=1000))
            await asyncio.wait([fetch, self.failed], return_when=asyncio.FIRST_COMPLETED)
            if self.failed.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await fetch
                self.failed.result()  # raises the generation's failure
            self._hand_over(fetch.result())

    def _hand_over(self, batch: dict[TopicPartition, list[Any]]) -> None:
        taken = False
        for tp, messages in batch.items():
            if not messages or tp.partition not in self.owned:
                continue  # fetched before a revocation: not this generation's
            if not self.live:  # a rebuild under way: read again once it is ready
                self.consumer.seek(tp, messages[0].offset)
                continue
            for m in messages:
                self.engine.take(m)
            taken = True
        if taken:
            self.engine.after_batch()

    async def close(self) -> None:
        await self._end()
        await self.producers.close()
        await self.consumer.stop()
