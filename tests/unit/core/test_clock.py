"""The engines' clock loop ends when its task is cancelled, whenever the cancel lands."""

import asyncio

from sumi.core import clock


async def test_a_cancel_that_lands_as_the_wake_comes_still_stops_the_loop() -> None:
    # WF-46: a revoked generation's scheduler must end, or its partitions are never handed over.
    # Python 3.11's `asyncio.wait_for` returned the inner result and dropped a cancel that came
    # in the same loop turn as the wake: the loop ran on and its engine's teardown hung for good.
    wake = asyncio.Event()
    steps: list[int] = []

    def step() -> int | None:
        steps.append(1)
        return None

    task = asyncio.create_task(clock.drive(step, wake))
    while not steps:
        await asyncio.sleep(0)
    await asyncio.sleep(0)  # parked in the wait
    wake.set()
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=2)
    try:
        assert task in done and task.cancelled(), "the clock loop ran on after its cancel"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
