"""What a context prints reaches its sink, bounded per context, with every refused line counted,
and its uncaught error after it; in both runtimes (one contract, two implementations)."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sumi.runtime import EnvSpec, JsRuntime, Limits, PyRuntime
from sumi.runtime._lograte import BURST
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, js, js_queue, py, py_queue
from tests.unit.runtime.workflow_testkit import StepHost, Workflows, invocation, js_run, py_run, wf

__all__ = ["wf"]  # the fixture: both runtimes

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
    ctx.log_sink = lambda level, text, dropped, step: got.append((level, text, dropped))
    result = await ctx.invoke_queue(batch(), ENV)
    await ctx.stop()
    assert not result.ok
    printed = [g for g in got if g[1].startswith("line")]
    told = sum(g[2] for g in got)
    assert len(printed) + told == LINES  # each line kept or counted
    assert BURST <= len(printed) < BURST + 200 and told > 0
    assert got[-1][0] == "error" and got[-1][1].startswith("uncaught ") and "boom" in got[-1][1]


STEP_JS = js_run("""
console.log('before');
await step.do('charge', async () => { console.log('inside charge'); return { ok: true }; });
console.log('after');
""")
STEP_PY = py_run("""
print('before')
async def charge():
    print('inside charge')
    return {'ok': True}
await step.do('charge', charge)
print('after')
""")


async def test_a_workflow_line_names_the_step_whose_effect_printed_it(wf: Workflows) -> None:
    # WF-34, WF-41: the step bound to the context, as its effect's lines say
    host = StepHost()
    ctx = await wf.runtime.start_context(wf.modules(STEP_JS, STEP_PY), wf.main, Limits(cpu_ms=5000), host)
    got: list[tuple[str, str | None]] = []
    ctx.log_sink = lambda level, text, dropped, step: got.append((text, step))
    outcome = await ctx.invoke_workflow(invocation(), EnvSpec(), host)
    await ctx.stop()
    assert outcome.kind == "complete"
    assert got == [("before", None), ("inside charge", "charge"), ("after", None)]
