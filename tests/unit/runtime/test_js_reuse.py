"""A queue context serves invocation after invocation (the engine's warm pool relies on it),
and a context stopped by a limit says so, so the pool never hands it out again."""

from sumi.queue._contexts import ContextPool
from sumi.runtime import JsRuntime, Limits
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue


async def test_a_js_context_serves_batch_after_batch_until_a_limit_stops_it() -> None:
    rt = JsRuntime()
    await rt.start()
    try:
        source = js_queue(
            "globalThis.n = (globalThis.n || 0) + 1;"
            "if (globalThis.n === 3) for (;;) {}"
            "await batch.retryAll(globalThis.n);"
        )
        host = Host()
        ctx = await rt.start_context(js(source), "worker.js", Limits(cpu_ms=300), host)
        for i in (1, 2):
            result = await ctx.invoke_queue(batch(batch_id=f"b{i}"), ENV, host)
            assert result.ok, result
        assert [args["delaySeconds"] for _, args in host.calls] == [1, 2]  # one warm context
        result = await ctx.invoke_queue(batch(batch_id="b3"), ENV, host)
        assert not result.ok and result.reason == "cpu_limit"
        assert ctx.stop_reason == "cpu_limit"  # so the pool stops it instead of keeping it
        pool = ContextPool()
        pool.give(("c1", "v1"), ctx, reusable=True, limit=2)
        assert pool.take(("c1", "v1")) is None
    finally:
        await rt.close()
