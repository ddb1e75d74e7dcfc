"""Warm contexts for queue batches: which context may serve the next batch, and which is stopped."""

import asyncio

from sumi.queue._contexts import ContextPool

A, B = ("c1", "v1"), ("c1", "v2")


class FakeContext:
    def __init__(self, name: str) -> None:
        self.id = name
        self.stop_reason: str | None = None
        self.stops = 0

    async def stop(self) -> None:
        self.stops += 1
        self.stop_reason = "stopped"


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_returned_context_serves_the_next_batch_of_its_pair() -> None:
    pool, ctx = ContextPool(), FakeContext("x")
    pool.give(A, ctx, reusable=True, limit=2)
    assert pool.take(B) is None  # another Version never gets it
    assert pool.take(A) is ctx
    assert pool.take(A) is None


async def test_a_context_that_may_not_serve_again_is_stopped() -> None:
    pool = ContextPool()
    threw, limited = FakeContext("threw"), FakeContext("limited")
    limited.stop_reason = "cpu_limit"
    pool.give(A, threw, reusable=False, limit=2)
    pool.give(A, limited, reusable=True, limit=2)
    assert pool.stopping("c1")
    await settle()
    assert threw.stops == 1 and limited.stops == 1
    assert pool.take(A) is None and not pool.stopping("c1")


async def test_at_most_limit_idle_contexts_are_kept() -> None:
    pool = ContextPool()
    ctxs = [FakeContext(str(i)) for i in range(3)]
    for ctx in ctxs:
        pool.give(A, ctx, reusable=True, limit=2)
    await settle()
    assert pool.idle(A) == 2 and ctxs[2].stops == 1


async def test_a_context_that_died_while_idle_is_never_handed_out() -> None:
    pool, ctx = ContextPool(), FakeContext("x")
    pool.give(A, ctx, reusable=True, limit=2)
    ctx.stop_reason = "stopped"  # e.g. its runtime process exited
    assert pool.take(A) is None


async def test_a_version_leaving_the_allocation_retires_its_contexts() -> None:
    stopped: list[bool] = []
    pool = ContextPool(on_stopped=lambda: stopped.append(True))
    old, new = FakeContext("old"), FakeContext("new")
    pool.give(A, old, reusable=True, limit=2)
    pool.give(B, new, reusable=True, limit=2)
    pool.retire(lambda key: key == B)
    assert pool.stopping("c1")  # a delete's stop boundary waits for this (QC-42)
    await settle()
    assert old.stops == 1 and new.stops == 0 and stopped == [True]
    assert pool.take(A) is None and pool.take(B) is new


class UnstoppableContext(FakeContext):
    async def stop(self) -> None:
        raise TimeoutError("the runtime did not answer")


async def test_an_unconfirmed_stop_marks_the_consumer_boundary_unproven() -> None:
    # QC-42, QC-47: a stop the runtime did not confirm is never taken as a proven boundary;
    # the engine then reports the delete reconciling/unknown until the runtime has exited.
    pool = ContextPool()
    pool.give(A, UnstoppableContext("stuck"), reusable=False, limit=2)
    await settle()
    assert not pool.stopping("c1")
    assert pool.unconfirmed == {"c1"}
    pool.give(B, FakeContext("fine"), reusable=False, limit=2)
    await settle()
    assert pool.unconfirmed == {"c1"}  # a later good stop does not prove the earlier one


class Starts:
    """Context starts that finish when the test says, counted."""

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[FakeContext]] = []

    def start(self) -> "asyncio.Future[FakeContext]":
        fut: asyncio.Future[FakeContext] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        return fut


async def test_a_batch_waiting_for_a_start_takes_a_context_handed_back_first() -> None:
    # QC-6: a burst that raises the concurrency waits for no start it does not need
    pool, starts = ContextPool(), Starts()
    got = pool.acquire(A, starts.start, lambda: True, limit=2)
    await settle()
    assert len(starts.pending) == 1 and not got.done()
    warm = FakeContext("warm")
    pool.give(A, warm, reusable=True, limit=2)  # another batch of the pair ended first
    assert got.done() and got.result() is warm
    assert pool.stopping("c1")  # the start goes on, and a delete waits for it (QC-42)
    late = FakeContext("late")
    starts.pending[0].set_result(late)
    await settle()
    assert not pool.stopping("c1") and pool.take(A) is late  # kept for the next batch


async def test_a_new_start_begins_only_when_every_start_is_promised() -> None:
    # QC-6: each waiting batch has a start of its own or a context on its way, never more starts
    pool, starts = ContextPool(), Starts()
    first = pool.acquire(A, starts.start, lambda: True, limit=4)
    second = pool.acquire(A, starts.start, lambda: True, limit=4)
    await settle()
    assert len(starts.pending) == 2
    pool.give(A, FakeContext("back"), reusable=True, limit=4)  # first is served
    third = pool.acquire(A, starts.start, lambda: True, limit=4)
    await settle()
    assert len(starts.pending) == 2  # two starts in progress for two waiting batches
    ctxs = [FakeContext("s1"), FakeContext("s2")]
    for fut, ctx in zip(starts.pending, ctxs, strict=True):
        fut.set_result(ctx)
    await settle()
    assert first.done() and {second.result(), third.result()} == set(ctxs)


async def test_a_failed_start_fails_the_batch_it_was_promised_to() -> None:
    # QC-32: the batch ends as its handler could not run; no batch waits for ever
    pool, starts = ContextPool(), Starts()
    got = pool.acquire(A, starts.start, lambda: True, limit=2)
    await settle()
    starts.pending[0].set_exception(RuntimeError("runtime gone"))
    await settle()
    assert isinstance(got.exception(), RuntimeError) and not pool.stopping("c1")


async def test_a_start_of_a_pair_no_longer_served_is_stopped_when_nobody_waits() -> None:
    # QC-42: a context of a deleted Consumer is stopped physically, never kept
    pool, starts = ContextPool(), Starts()
    got = pool.acquire(A, starts.start, lambda: False, limit=2)
    await settle()
    pool.release(A, got, limit=2)  # its batch ended first (its commit failed)
    late = FakeContext("late")
    starts.pending[0].set_result(late)
    await settle()
    assert late.stops == 1 and pool.take(A) is None and not pool.stopping("c1")


async def test_a_context_promised_to_a_batch_that_left_goes_to_the_next() -> None:
    # QC-6: a context is never lost between a hand-over and a batch that ended first
    pool, starts = ContextPool(), Starts()
    gone = pool.acquire(A, starts.start, lambda: True, limit=2)
    ctx = FakeContext("x")
    pool.give(A, ctx, reusable=True, limit=2)
    pool.release(A, gone, limit=2)
    assert pool.take(A) is ctx
