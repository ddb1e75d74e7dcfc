"""JavaScript contexts that share a worker thread (a cell): contexts of one Version, each
its own realm; a stop cuts one context off, a limit ends the thread and evicts the rest."""

from __future__ import annotations

import asyncio
import time
import uuid

from sumi.runtime import JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue, js_runtime

SMALL = Limits(cpu_ms=500, heap_mb=32)
TIGHT_HEAP = Limits(cpu_ms=30_000, heap_mb=32)  # a loaded machine must not turn the heap test into a CPU one
FOREVER = "await new Promise(() => {});"


rt = js_runtime(test_hooks=True)  # the tests count the cells inside the runtime process


def share() -> str:
    return f"version-{uuid.uuid4().hex[:8]}"


async def threads(rt: JsRuntime, key: str) -> int:
    """Worker threads (cells) alive in the runtime process for contexts shared under `key`."""
    return int(await rt.debug_eval(f"return sumiCells().filter((c) => c.key === {key!r}).length;"))


async def test_contexts_of_one_version_share_a_thread_and_nothing_else(rt: JsRuntime) -> None:  # WF-32
    key = share()
    code = js(
        "let n = 0;\n"
        + js_queue(
            "n += 1; globalThis.seen = (globalThis.seen || 0) + 1; Object.prototype.x = n;"
            "await batch.retryAll(n + globalThis.seen + (({}).y ? 100 : 0));"
            "Object.prototype.y = true;"
        )
    )
    ctxs = [await rt.start_context(code, "worker.js", share=key) for _ in range(5)]
    assert await threads(rt, key) == 1  # five contexts, one thread
    for ctx in ctxs:
        host = Host()
        assert (await ctx.invoke_queue(batch(), ENV, host)).ok
        # fresh module state and a fresh realm in each: n = 1, seen = 1, no prototype of another
        assert host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 2})]
    await asyncio.gather(*(ctx.stop() for ctx in ctxs))


async def test_each_context_runs_its_own_source_whatever_the_thread_compiled_before(rt: JsRuntime) -> None:  # WF-32
    # A thread keeps the code cache of the modules it compiled: a context whose module of the
    # same name has other source must run that source, before and after the cache is made.
    key = share()
    for n in (1, 2, 1, 3):
        ctx = await rt.start_context(js(js_queue(f"await batch.retryAll({n});")), "worker.js", share=key)
        host = Host()
        assert (await ctx.invoke_queue(batch(), ENV, host)).ok
        assert host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": n})]
        await ctx.stop()


async def test_a_stopped_context_never_reaches_the_host_again(rt: JsRuntime) -> None:  # WF-26, WF-46
    key = share()
    host = Host()
    late = js(js_queue("setTimeout(() => batch.retryAll(7), 300); await new Promise(() => {});"))
    a = await rt.start_context(late, "worker.js", host_call=host, share=key)
    b = await rt.start_context(js(js_queue("await batch.acknowledgeAll();")), "worker.js", share=key)
    pending = asyncio.create_task(a.invoke_queue(batch(), ENV))
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    await a.stop()
    assert time.perf_counter() - started < 0.5  # dropped from its thread, not waited out
    assert (await pending).reason == "stopped"
    await asyncio.sleep(0.6)  # well past its timer
    assert host.calls == []
    assert (await b.invoke_queue(batch(), ENV, Host())).ok  # the thread and its other context go on
    await b.stop()


async def test_a_stop_while_its_code_runs_ends_the_thread(rt: JsRuntime) -> None:  # WF-46
    key = share()
    busy = js(js_queue("const end = Date.now() + 10000; while (Date.now() < end) {} await batch.retryAll(1);"))
    a = await rt.start_context(busy, "worker.js", share=key)
    b = await rt.start_context(js(js_queue(FOREVER)), "worker.js", share=key)
    host = Host()
    running = asyncio.create_task(a.invoke_queue(batch(), ENV, host))
    waiting = asyncio.create_task(b.invoke_queue(batch(), ENV))
    await asyncio.sleep(0.2)
    started = time.perf_counter()
    await a.stop()
    assert time.perf_counter() - started < 6  # the drop is not confirmed (2 s grace); the thread is ended
    assert (await running).reason == "stopped"
    assert (await asyncio.wait_for(waiting, 5)).reason == "evicted"
    await asyncio.sleep(0.2)
    assert host.calls == []


async def test_a_cpu_limit_stops_its_context_and_evicts_the_others(rt: JsRuntime) -> None:
    key = share()
    spin = await rt.start_context(js(js_queue("while (true) {}")), "worker.js", SMALL, share=key)
    idle = await rt.start_context(js(js_queue(FOREVER)), "worker.js", SMALL, share=key)
    other = await rt.start_context(js(js_queue(FOREVER)), "worker.js", SMALL, share=share())
    idle_run = asyncio.create_task(idle.invoke_queue(batch(), ENV))
    other_run = asyncio.create_task(other.invoke_queue(batch(), ENV))
    assert (await asyncio.wait_for(spin.invoke_queue(batch(), ENV), 10)).reason == "cpu_limit"
    assert (await asyncio.wait_for(idle_run, 5)).reason == "evicted"
    await asyncio.sleep(0.2)
    assert not other_run.done()  # another Version's thread is untouched
    await other.stop()
    assert (await other_run).reason == "stopped"


async def test_waiting_contexts_do_not_spend_each_others_cpu(rt: JsRuntime) -> None:
    key = share()
    hosts = [Host() for _ in range(3)]
    code = js(
        js_queue(
            "for (let i = 0; i < 20; i++) { const end = Date.now() + 10; while (Date.now() < end) {}"
            " await new Promise((r) => setTimeout(r, 5)); } await batch.acknowledgeAll();"
        )
    )
    ctxs = [await rt.start_context(code, "worker.js", SMALL, share=key) for _ in hosts]
    # each spends ~200 ms of its 500 ms; together 600 ms on one thread, none over its own budget
    results = await asyncio.gather(*(c.invoke_queue(batch(), ENV, h) for c, h in zip(ctxs, hosts, strict=True)))
    assert [r.ok for r in results] == [True, True, True]
    await asyncio.gather(*(c.stop() for c in ctxs))


async def test_a_heap_limit_evicts_every_context_of_the_thread_and_alone_it_is_its_own(rt: JsRuntime) -> None:
    key = share()
    bomb = js(js_queue("const a = []; for (;;) a.push(new Array(1 << 16).fill(1));"))
    a = await rt.start_context(bomb, "worker.js", TIGHT_HEAP, share=key)
    b = await rt.start_context(js(js_queue(FOREVER)), "worker.js", TIGHT_HEAP, share=key)
    b_run = asyncio.create_task(b.invoke_queue(batch(), ENV))
    # which context filled the shared heap cannot be told: both are evicted
    assert (await asyncio.wait_for(a.invoke_queue(batch(), ENV), 20)).reason == "evicted"
    assert (await asyncio.wait_for(b_run, 5)).reason == "evicted"
    alone = await rt.start_context(bomb, "worker.js", TIGHT_HEAP)
    assert (await asyncio.wait_for(alone.invoke_queue(batch(), ENV), 20)).reason == "heap_limit"


async def test_a_thread_holds_a_bounded_number_of_contexts(rt: JsRuntime) -> None:
    key = share()
    ctxs = [await rt.start_context(js(js_queue(FOREVER)), "worker.js", share=key) for _ in range(40)]
    assert await threads(rt, key) == 2  # 32 per thread
    await asyncio.gather(*(c.stop() for c in ctxs))


async def test_a_thread_outlives_its_last_context_for_the_next_one(rt: JsRuntime) -> None:
    key = share()
    code = js("let n = 0;\n" + js_queue("n += 1; await batch.retryAll(n);"))
    for _ in range(3):  # one after another, as at concurrency 1
        ctx = await rt.start_context(code, "worker.js", share=key)
        host = Host()
        assert (await ctx.invoke_queue(batch(), ENV, host)).ok
        assert host.calls == [("batch.retryAll", {"batchId": "batch-1", "delaySeconds": 1})]  # WF-32
        await ctx.stop()
        assert await threads(rt, key) == 1


async def test_a_cell_that_ends_while_the_checks_are_quiet_leaves_no_wait_behind(rt: JsRuntime) -> None:  # QC-32
    # The quiet budget checks await each cell's next entry; a cell that ends meanwhile settles
    # that wait (a pending one would hold the ended cell for the runtime's life).
    ctx = await rt.start_context(js(js_queue("")), "worker.js", SMALL)  # a cell of its own
    assert (await ctx.invoke_queue(batch(), ENV, Host())).ok
    deadline = time.monotonic() + 10
    while int(await rt.debug_eval("return sumiWaits();")) < 1:  # quiet after a second of idle looks
        assert time.monotonic() < deadline, "the checks never went quiet"
        await asyncio.sleep(0.2)
    await ctx.stop()  # its cell ends with it
    await asyncio.sleep(0.2)
    # At most one wait per live cell (other tests' cells live on in this runtime).
    waits, cells = await rt.debug_eval("return [sumiWaits(), sumiCells().length];")
    assert waits <= cells, (waits, cells)
