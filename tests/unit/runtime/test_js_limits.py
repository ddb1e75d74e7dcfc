"""JavaScript-only limits and process behaviour; the shared contract is test_contract.py."""

from __future__ import annotations

import asyncio
import os
import signal

from sumi.runtime import JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue

SMALL = Limits(cpu_ms=500, heap_mb=32)
COUNTER = "let n = 0;\n" + js_queue("n += 1; await batch.retryAll(n);")


async def still_serves(rt: JsRuntime) -> None:
    host = Host()
    ctx = await rt.start_context(js(js_queue("await batch.acknowledgeAll();")), "worker.js", host_call=host)
    assert (await ctx.invoke_queue(batch(), ENV)).ok
    await ctx.stop()


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
