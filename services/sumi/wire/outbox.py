"""Group commit: every record an engine decides goes out in one Kafka transaction (the queue and
workflow engines each keep one outbox; it lives here so neither engine package imports the other).

Decisions put records here (already folded into the engine's state, since the
engine is the single writer of its logs) and get a future that resolves
once the transaction holding them has committed. Records leave in the order
they were put, so the log's order is the order of the decisions. A failed
transaction fails every waiter and ends the process: state is then rebuilt from
the log, never patched up.

The transactions take turns on a pair of transactional producers. After a commit the
coordinator still writes its markers for a few ms, and refuses the same transactional ID's
next AddPartitionsToTxn meanwhile (CONCURRENT_TRANSACTIONS, KAFKA-5477): with one producer
every back-to-back commit waited for that, retrying. The other producer's coordinator state is
idle, so the next transaction begins at once. Order is kept: a transaction begins only after
the one before it has committed (EndTxn answered: decided, its records already in the log), and
a read_committed reader sees nothing after the earlier one's records until its markers are in.
Measured on the reference machine, back-to-back one-record transactions: p50 4.6 ms and 1.98
AddPartitionsToTxn requests each with one producer, 2.1 ms and 1.00 with two.

The next transaction is begun ahead: while one commits, the other producer begins its
transaction and adds the partitions this one and the one before both wrote (AddPartitionsToTxn),
so when the next records come they go straight to their Produce, a round trip less on every
commit's path. Order is unchanged, since no record of the next transaction is sent before the
one before it has committed, and a partition a transaction has added but not written holds
nothing back (the last stable offset moves on at its first record only). A transaction begun
ahead and not used within `AHEAD_IDLE_S` is aborted, so an idle outbox keeps none open (the
coordinator would abort it, and fence the producer, after its timeout).
"""

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer, TopicPartition

from sumi.core import clock
from sumi.wire import kafka
from sumi.wire.topics import partition_for

log = logging.getLogger(__name__)
# Set by `sumi serve` (never in a test's own process): how long a process whose outbox failed
# may take to close things before it exits anyway. Its loops end on the failure, but a client
# waiting on a dead broker can hold the close for good (seen once under a broker's SIGKILL in a
# loaded full run: the workflow engine hung, its contexts failing, instead of restarting).
_ENDING_GRACE_S: float | None = None
EXIT_OUTBOX_FAILED = 70
# How long a transaction begun ahead waits for records before it is aborted: well inside the
# transaction timeout (aiokafka's 60 s), and long enough that a steady trickle keeps it.
AHEAD_IDLE_S = 5.0


def end_process_on_failure(grace_s: float) -> None:
    global _ENDING_GRACE_S
    _ENDING_GRACE_S = grace_s


def end_soon() -> None:
    if _ENDING_GRACE_S is not None:
        asyncio.get_running_loop().call_later(_ENDING_GRACE_S, _exit)


def _exit() -> None:
    log.error("the outbox failed and closing did not end the process; exiting (the log is the state)")
    os._exit(EXIT_OUTBOX_FAILED)


class Box(Protocol):
    """What a processor decides on: an `Outbox` (a test's stand-in may be another)."""

    failed: BaseException | None
    on_idle: Callable[[dict[tuple[str, int], int]], None] | None

    @property
    def busy(self) -> bool: ...

    @property
    def written(self) -> dict[tuple[str, int], int]: ...

    def put(self, outs: list[tuple[str, str, Any]]) -> "asyncio.Future[None]": ...

    async def idle(self) -> None: ...

    async def run(self) -> None: ...


class Outbox:
    def __init__(self, producers: Sequence[AIOKafkaProducer], partitions: int) -> None:
        assert producers, "an outbox needs a producer"
        self.producers = tuple(producers)
        self._turn = 0
        self.partitions = partitions
        self._items: list[tuple[str, str, Any]] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._event = asyncio.Event()
        self.failed: BaseException | None = None
        self._last: asyncio.Future[None] | None = None
        self._committing = False
        self._ahead: set[int] = set()  # the turns whose next transaction is begun already
        self._last_tps: set[TopicPartition] = set()
        # The last offset each (topic, partition) got from this outbox's commits: an engine's
        # state is the fold of its log only once it has read past them (a snapshot's moment).
        self.written: dict[tuple[str, int], int] = {}
        # Called after a commit that leaves nothing put: the engine's state holds no decision
        # the log lacks (an engine that is its log's only writer snapshots then).
        self.on_idle: Callable[[dict[tuple[str, int], int]], None] | None = None

    @property
    def busy(self) -> bool:
        """Records put and not yet committed: the state holds decisions the log does not yet."""
        return bool(self._items) or self._committing

    def put(self, outs: list[tuple[str, str, Any]]) -> "asyncio.Future[None]":
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.failed is not None:
            fut.set_exception(RuntimeError("the outbox failed"))
        elif not outs:
            fut.set_result(None)
        else:
            self._items += outs
            self._waiters.append(fut)
            self._last = fut
            self._event.set()
        return fut

    async def idle(self) -> None:
        """Once everything put so far has committed (or failed)."""
        if self._last is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._last)

    async def run(self) -> None:
        try:
            await self._run()
        finally:
            await self._abandon_ahead()

    async def _run(self) -> None:
        while True:
            items, waiters = [], []
            try:
                await self._records_put()
                items, waiters = self._items, self._waiters
                self._items, self._waiters = [], []
                turn = self._turn
                producer = self.producers[turn]
                self._turn = (turn + 1) % len(self.producers)
                self._committing = True
                if turn in self._ahead:
                    self._ahead.discard(turn)
                    txn = kafka.begun_ahead(producer)
                else:
                    txn = producer.transaction()
                async with txn:
                    sent = [
                        await kafka.send(producer, topic, key, record, self.partitions) for topic, key, record in items
                    ]
                    await self._begin_next({TopicPartition(t, partition_for(k, self.partitions)) for t, k, _ in items})
                for fut in sent:
                    meta = await fut  # delivered: the commit waited for every record
                    self.written[(meta.topic, meta.partition)] = meta.offset
            except BaseException as exc:
                self.failed = exc
                if not isinstance(exc, asyncio.CancelledError):  # a stop is not a failure
                    end_soon()
                for fut in waiters + self._waiters:
                    if not fut.done():
                        fut.set_exception(RuntimeError(f"commit failed: {exc!r}"))
                        fut.exception()  # retrieved: whoever awaits it still sees it
                raise
            finally:
                self._committing = False
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            if self.on_idle is not None and not self._items:
                self.on_idle(self.written)

    async def _records_put(self) -> None:
        """Until records are put; a transaction begun ahead that waits too long is aborted."""
        if self._ahead:
            if not await clock.woken(self._event, AHEAD_IDLE_S):
                for turn in sorted(self._ahead):
                    self._ahead.discard(turn)
                    await self.producers[turn].abort_transaction()
        await self._event.wait()
        self._event.clear()

    async def _begin_next(self, tps: set[TopicPartition]) -> None:
        """Begin the next turn's transaction with the partitions this one shares with the one
        before (an engine's own partition; not the odd other topic a single decision wrote)."""
        steady, self._last_tps = tps & self._last_tps, tps
        turn = self._turn
        if steady and turn not in self._ahead and len(self.producers) > 1:
            if await kafka.begin_ahead(self.producers[turn], steady):
                self._ahead.add(turn)

    async def _abandon_ahead(self) -> None:
        """On a stop, a transaction begun ahead is aborted rather than left to the coordinator's
        timeout (a replica taking the partition over would wait for that abort); bounded, since
        the broker may be gone."""
        for turn in sorted(self._ahead):
            self._ahead.discard(turn)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.producers[turn].abort_transaction(), 1.0)
