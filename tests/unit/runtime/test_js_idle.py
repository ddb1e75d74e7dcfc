"""An idle JS runtime sleeps: its budget checks slow down while no cell's thread works, and
still catch code that starts on its own at once.

Counted in wakeups (the process's voluntary context switches), not in time, against a bound
far from both sides: a check every 100 ms alone is 10 a second; the quiet runtime makes about
1 (its checks every second) plus what Node's own threads do."""

import asyncio
import time

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
        await asyncio.sleep(2)  # past the invocation's own work and the checks' slowing down
        before = wakeups(pid)
        await asyncio.sleep(3)
        assert wakeups(pid) - before < 3 * 5
    finally:
        await rt.close()


async def test_a_loop_a_quiet_context_starts_from_its_own_timer_is_stopped_on_time() -> None:
    # QC-32: the checks sleep for a second while nothing runs; the thread's entry into the
    # context's timer wakes them, so the CPU limit holds to within a few checks, not a second.
    rt = JsRuntime()
    await rt.start()
    try:
        host = Host()
        late = []
        for _ in range(3):  # each run's timer fires in another phase of the quiet checks
            source = js(js_queue("await new Promise((r) => setTimeout(r, 2200)); for (;;) {}"))
            ctx = await rt.start_context(source, "worker.js", Limits(cpu_ms=200), host)
            t0 = time.monotonic()
            result = await ctx.invoke_queue(batch(), ENV, host)
            assert (result.ok, result.reason) == (False, "cpu_limit"), result
            late.append(time.monotonic() - t0 - 2.2 - 0.2)
        assert max(late) < 0.25, late  # the 1 s backstop alone: about 0.5 s late
    finally:
        await rt.close()
