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
