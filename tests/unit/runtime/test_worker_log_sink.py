"""What a context prints reaches its sink, bounded per context, with every refused line counted,
and its uncaught error after it; in both runtimes (one contract, two implementations)."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sumi.runtime import JsRuntime, PyRuntime
from sumi.runtime._lograte import BURST
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue, py, py_queue

LINES = 3000
SOURCES = {
    "javascript": (
        js,
        js_queue(f"for (let i = 0; i < {LINES}; i++) console.log('line', i);\nthrow new Error('boom');"),
    ),
    "python": (py, py_queue(f"for i in range({LINES}):\n    print('line', i)\nraise RuntimeError('boom')")),
}


@pytest.fixture(params=list(SOURCES))
async def runtime(request: pytest.FixtureRequest) -> AsyncIterator[tuple[str, Any]]:
    rt = JsRuntime() if request.param == "javascript" else PyRuntime()
    await rt.start()
    yield request.param, rt
    await rt.close()


async def test_a_print_loop_is_bounded_and_counted_then_its_error_told(runtime: tuple[str, Any]) -> None:
    # QC-32: the handler's uncaught error reaches its log; QC-6: one context cannot flood the Host
    kind, rt = runtime
    modules, source = SOURCES[kind]
    main = "worker.js" if kind == "javascript" else "worker.py"
    ctx = await rt.start_context(modules(source), main, host_call=Host())
    got: list[tuple[str, str, int]] = []
    ctx.log_sink = lambda level, text, dropped: got.append((level, text, dropped))
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    assert not result.ok
    printed = [g for g in got if g[1].startswith("line")]
    told = sum(g[2] for g in got)
    assert len(printed) + told == LINES  # each line kept or counted
    assert BURST <= len(printed) < BURST + 200 and told > 0
    assert got[-1][0] == "error" and got[-1][1].startswith("uncaught ") and "boom" in got[-1][1]
