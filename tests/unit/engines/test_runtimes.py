"""One runtime per kind and Space for an engine: started once however many ask at the same time, restarted on demand.

A stand-in runtime counts starts and closes (no process: the pool is what is under test)."""

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from sumi.core.config import Settings
from sumi.engines.runtimes import Runtimes
from sumi.queue.engine import Engine as QueueEngine
from sumi.runtime import Module
from sumi.runtime.types import Runtime


class Counted:
    def __init__(self, kind: str) -> None:
        self.kind, self.closed, self.busy = kind, False, False

    def idle(self) -> bool:
        return not self.busy

    async def start(self) -> None:
        return None

    async def start_context(self, modules: Sequence[Any], main_module: str, *args: Any, **kw: Any) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        self.closed = True


class Starts:
    """A start that takes a while (so asks overlap), and fails the first `failures` times."""

    def __init__(self, failures: int = 0) -> None:
        self.started: list[Counted] = []
        self.failures = failures

    async def __call__(self, kind: str) -> Runtime:
        await asyncio.sleep(0.01)
        if self.failures:
            self.failures -= 1
            raise OSError("the runtime process did not start")
        rt = Counted(kind)
        self.started.append(rt)
        return rt  # type: ignore[return-value]  # a stand-in: start_context is never called here


async def test_asks_at_the_same_time_share_one_start() -> None:  # QC-42, WF-14: one process per kind
    starts = Starts()
    pool = Runtimes(start=starts)
    got = await asyncio.gather(*(pool.get("javascript") for _ in range(5)), pool.get("python"))
    assert len(starts.started) == 2
    assert len({id(rt) for rt in got[:5]}) == 1 and got[5] is not got[0]
    assert await pool.get("javascript") is got[0]  # later asks too


async def test_a_failed_start_is_tried_again_at_the_next_ask() -> None:
    starts = Starts(failures=1)
    pool = Runtimes(start=starts)
    with pytest.raises(OSError):
        await pool.get("python")
    assert isinstance(await pool.get("python"), Counted)


async def test_restart_closes_every_runtime_a_starting_one_included_and_the_next_ask_starts_anew() -> None:
    starts = Starts()
    pool = Runtimes(start=starts)
    first = await pool.get("javascript")
    asker = asyncio.ensure_future(pool.get("python"))  # still starting when the restart comes
    await asyncio.sleep(0)
    await pool.restart()
    assert [rt.closed for rt in starts.started] == [True, True]
    assert (await asker).closed  # the asker got the runtime that started, now closed
    assert await pool.get("javascript") is not first


async def test_an_asker_cancelled_does_not_cancel_the_start_the_others_await() -> None:
    pool = Runtimes(start=Starts())
    one, two = asyncio.ensure_future(pool.get("python")), asyncio.ensure_future(pool.get("python"))
    await asyncio.sleep(0)
    one.cancel()
    assert isinstance(await two, Counted)


async def test_after_close_nothing_starts() -> None:
    starts = Starts()
    pool = Runtimes(start=starts)
    rt = await pool.get("python")
    await pool.close()
    assert rt.closed  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError):
        await pool.get("python")


async def test_the_queue_engine_starts_one_runtime_when_two_batches_start_at_once() -> None:  # QC-42
    class NoWorkflows:
        async def call(self, code: Any, method: str, args: dict[str, Any]) -> Any: ...

        async def run(self) -> None: ...

    engine = QueueEngine(Settings("127.0.0.1:1", "postgresql://unused"), NoWorkflows())  # nothing connects here
    starts = Starts()
    engine.runtimes = Runtimes(start=starts)
    a, b = await asyncio.gather(engine.runtime("javascript"), engine.runtime("javascript"))
    assert a is b and len(starts.started) == 1


async def test_each_space_has_runtimes_of_its_own() -> None:
    starts = Starts()
    pool = Runtimes(start=starts)
    a, b, a_again = await asyncio.gather(
        pool.get("javascript", "space-a"), pool.get("javascript", "space-b"), pool.get("javascript", "space-a")
    )
    assert a is a_again and a is not b and len(starts.started) == 2


async def test_an_idle_runtime_is_closed_and_a_busy_one_kept() -> None:
    pool = Runtimes(start=Starts(), idle_s=0.05)
    idle, busy = await pool.get("javascript", "quiet"), await pool.get("javascript", "busy")
    busy.busy = True  # type: ignore[attr-defined]
    await asyncio.sleep(0.1)
    await pool.get("javascript", "another")  # an ask is when idle runtimes are looked at
    await asyncio.sleep(0)
    assert idle.closed and not busy.closed  # type: ignore[attr-defined]
    assert await pool.get("javascript", "busy") is busy
    assert await pool.get("javascript", "quiet") is not idle  # asked again: started anew


async def test_two_spaces_never_share_a_javascript_process() -> None:
    pool = Runtimes(Settings("", ""))  # the real runtimes, on the default settings
    try:
        a, b = await pool.get("javascript", "space-a"), await pool.get("javascript", "space-b")
        ctx_a = await a.start_context([Module("worker.js", "export default {};")], "worker.js")
        ctx_b = await b.start_context([Module("worker.js", "export default {};")], "worker.js")
        assert a.pid is not None and b.pid is not None  # type: ignore[attr-defined]
        assert a.pid != b.pid  # type: ignore[attr-defined]
        assert not a.idle() and not b.idle()
        await ctx_a.stop()
        await ctx_b.stop()
        assert a.idle() and b.idle()
    finally:
        await pool.close()
