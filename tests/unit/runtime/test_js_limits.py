"""Limits, physical stop and fresh state of JavaScript contexts."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import pytest
from runtime_testkit import ENV, Host, batch, js, js_queue

from sumi.runtime import JsRuntime, Limits

SMALL = Limits(cpu_ms=500, heap_mb=32)
COUNTER = "let n = 0;\n" + js_queue("n += 1; await batch.retryAll(n);")


@pytest.fixture(scope="module")
async def rt() -> AsyncIterator[JsRuntime]:
    runtime = JsRuntime()
    await runtime.start()
    yield runtime
    await runtime.close()


async def still_serves(rt: JsRuntime) -> None:
    host = Host()
    ctx = await rt.start_context(js(js_queue("await batch.acknowledgeAll();")), "worker.js", host_call=host)
    assert (await ctx.invoke_queue(batch(), ENV)).ok
    await ctx.stop()


async def test_infinite_loop_is_stopped_by_cpu_limit(rt: JsRuntime) -> None:  # QC-32
    ctx = await rt.start_context(js(js_queue("for (;;) {}")), "worker.js", SMALL, Host())
    result = await asyncio.wait_for(ctx.invoke_queue(batch(), ENV), 10)
    assert (result.ok, result.reason) == (False, "cpu_limit")
    assert (await ctx.invoke_queue(batch(), ENV)).reason == "stopped"
    await ctx.stop()
    await still_serves(rt)


async def test_loop_at_module_top_level_is_a_load_error(rt: JsRuntime) -> None:
    ctx = await rt.start_context(js("while (true) {}"), "worker.js", SMALL)
    assert "cpu_limit" in (await ctx.load_info()).load_error
    await still_serves(rt)


async def test_waiting_on_the_host_does_not_spend_cpu(rt: JsRuntime) -> None:
    async def slow(context_id: str, method: str, args: dict) -> None:
        await asyncio.sleep(0.8)  # longer than the 500 ms CPU budget

    ctx = await rt.start_context(js(js_queue("await batch.acknowledgeAll();")), "worker.js", SMALL, slow)
    assert (await ctx.invoke_queue(batch(), ENV)).ok
    await ctx.stop()


async def test_memory_bomb_is_stopped_by_heap_limit(rt: JsRuntime) -> None:  # QC-32
    bomb = js_queue("const a = []; for (;;) a.push({i: a.length, s: 'x' + a.length});")
    ctx = await rt.start_context(js(bomb), "worker.js", Limits(cpu_ms=20000, heap_mb=32), Host())
    result = await asyncio.wait_for(ctx.invoke_queue(batch(), ENV), 20)
    assert (result.ok, result.reason) == (False, "heap_limit")
    await still_serves(rt)


async def test_wall_limit(rt: JsRuntime) -> None:
    ctx = await rt.start_context(js(js_queue("await new Promise(() => {});")), "worker.js", Limits(wall_ms=300))
    assert (await ctx.invoke_queue(batch(), ENV)).reason == "wall_limit"


async def test_stopped_context_never_runs_again(rt: JsRuntime) -> None:  # WF-26, WF-46
    ticker = js_queue("""
      const tick = () => { batch.acknowledge('m1').catch(() => {}); setTimeout(tick, 2); };
      tick();
      await new Promise(() => {});
    """)
    host = Host()
    ctx = await rt.start_context(js(ticker), "worker.js", host_call=host)
    invocation = asyncio.create_task(ctx.invoke_queue(batch(), ENV))
    await asyncio.wait_for(host.called.wait(), 5)
    await ctx.stop()
    seen = len(host.calls)
    await asyncio.sleep(0.3)
    assert len(host.calls) == seen  # no host call arrives after the stop was confirmed
    assert (await invocation).reason == "stopped"
    assert (await ctx.invoke_queue(batch(), ENV)).reason == "stopped"


async def test_no_state_survives_between_contexts(rt: JsRuntime) -> None:  # WF-32
    host = Host()
    for _ in range(2):
        ctx = await rt.start_context(js(COUNTER), "worker.js", host_call=host)
        await ctx.invoke_queue(batch(), ENV)
        await ctx.invoke_queue(batch(), ENV)
        await ctx.stop()
    assert [a["delaySeconds"] for _, a in host.calls] == [1, 2, 1, 2]


async def test_contexts_are_isolated_from_each_other(rt: JsRuntime) -> None:  # WF-32
    host = Host()
    writer = js(js_queue("globalThis.shared = 41; Object.prototype.polluted = true;"))
    reader = js(js_queue("await batch.retryAll(({}).polluted || globalThis.shared ? 1 : 0);"))
    a = await rt.start_context(writer, "worker.js", host_call=host)
    b = await rt.start_context(reader, "worker.js", host_call=host)
    assert (await a.invoke_queue(batch(), ENV)).ok
    assert (await b.invoke_queue(batch(), ENV)).ok
    assert host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 0})]
    await a.stop()
    await b.stop()


async def test_runtime_process_death_stops_contexts_and_restarts() -> None:
    rt = JsRuntime()
    await rt.start()
    try:
        ctx = await rt.start_context(js(js_queue("await new Promise(() => {});")), "worker.js")
        invocation = asyncio.create_task(ctx.invoke_queue(batch(), ENV))
        await asyncio.sleep(0.1)
        old_pid = rt.pid
        os.kill(old_pid, signal.SIGKILL)
        assert (await asyncio.wait_for(invocation, 5)).reason == "stopped"
        await still_serves(rt)
        assert rt.pid != old_pid
    finally:
        await rt.close()
