"""sumi.core.offloop: heavy work off the loop, one thread at a time per Space (issue 21, class 9)."""

import asyncio
import threading
import time

from sumi.core.offloop import OffLoop


async def test_one_key_at_a_time_and_keys_side_by_side() -> None:
    # QC-21: one Space's burst of heavy checks holds one thread, the loop stays free
    off = OffLoop()
    busy: dict[str, int] = {}
    most: dict[str, int] = {}
    lock = threading.Lock()

    def work(key: str) -> str:
        with lock:
            busy[key] = busy.get(key, 0) + 1
            most[key] = max(most.get(key, 0), busy[key])
        time.sleep(0.02)
        with lock:
            busy[key] -= 1
        return key

    ticks = 0

    async def loop_ticks() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    ticker = asyncio.create_task(loop_ticks())
    done = await asyncio.gather(*(off.run(k, work, k) for k in ["a"] * 5 + ["b"] * 5))
    ticker.cancel()
    assert done == ["a"] * 5 + ["b"] * 5
    assert most == {"a": 1, "b": 1}
    assert ticks > 5, "the loop ran while the work did"
    assert off._turns == {}
