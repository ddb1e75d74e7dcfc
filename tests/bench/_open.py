"""An open loop: creates sent on a fixed schedule, each on its own, never waiting for earlier answers.

A closed loop (N users, each waiting for its answer) slows its own offered load as the system
slows, so it hides queueing; here the offered rate holds whatever happens, and latencies count
from when each create was due (a late sender is charged to the figure and reported too).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tests.bench.bench_workflow import pct

# A create that answers, then the instance's completion to wait for.
Create = Callable[[int], Awaitable[Awaitable[Any]]]

ON_TIME_MS = 1000.0


async def open_loop(name: str, rate: float, seconds: float, create: Create, drain: float = 60.0) -> dict[str, Any]:
    n = max(1, round(rate * seconds))
    posts: list[float] = []
    done: list[float] = []
    errors: list[str] = []
    late: list[float] = []
    last = [0.0]

    async def one(due: float, i: int) -> None:
        try:
            completion = await create(i)
            posts.append((time.perf_counter() - due) * 1000)
            await completion
        except Exception as e:  # an overloaded Host answering 429/503 is a figure, not a crash
            errors.append(type(e).__name__)
            return
        last[0] = time.perf_counter()
        done.append((last[0] - due) * 1000)

    tasks = []
    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        if (wait := due - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        late.append((time.perf_counter() - due) * 1000)
        tasks.append(asyncio.create_task(one(due, i)))
    _, pending = await asyncio.wait(tasks, timeout=drain)
    for task in pending:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*pending)
    on_time = 100 * sum(ms <= ON_TIME_MS for ms in done) / n
    out = {
        "system": name,
        "offered_per_s": rate,
        "instances": n,
        # completions over the time from the first send to the last completion
        "achieved_per_s": round(len(done) / max(last[0] - start, 1e-3), 1),
        "post_p50_ms": round(pct(posts, 50), 1),
        "post_p99_ms": round(pct(posts, 99), 1),
        "complete_p50_ms": round(pct(done, 50), 1),
        "complete_p99_ms": round(pct(done, 99), 1),
        "on_time_pct": round(on_time, 2),
        "sender_late_p99_ms": round(pct(late, 99), 1),
        "sender_late_max_ms": round(max(late), 1),
        "completed": len(done),
        "failed": len(errors) + len(pending),
    }
    out["sustainable"] = (
        out["post_p99_ms"] <= 100 and out["complete_p99_ms"] <= ON_TIME_MS and on_time >= 99.9 and not out["failed"]
    )
    print(json.dumps(out), flush=True)
    return out
