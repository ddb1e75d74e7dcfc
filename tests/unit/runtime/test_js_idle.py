"""An idle JS runtime sleeps: its budget checks slow down while no cell's thread works.

Counted in wakeups (the process's voluntary context switches), not in time, against a bound
far from both sides: a check every 10 ms alone is 100 a second; the idle runtime makes about
10 (its checks every 100 ms) plus what Node's own threads do."""

import asyncio

import psutil

from sumi.runtime import JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue


def wakeups(pid: int) -> int:
    """The main thread's: the one the budget checks run on."""
    return int(psutil.Process(pid).num_ctx_switches().voluntary)


async def test_an_idle_js_runtime_with_a_warm_context_wakes_rarely() -> None:
    # QC-25: a warm queue context stays ready for the next batch; keeping it costs no polling.
    rt = JsRuntime()
    await rt.start()
    try:
        host = Host()
        ctx = await rt.start_context(js(js_queue("")), "worker.js", Limits(cpu_ms=5000), host)
        assert (await ctx.invoke_queue(batch(), ENV, host)).ok
        pid = rt.pid
        assert pid is not None
        await asyncio.sleep(1)  # past the invocation's own work
        before = wakeups(pid)
        await asyncio.sleep(3)
        assert wakeups(pid) - before < 3 * 40
    finally:
        await rt.close()
