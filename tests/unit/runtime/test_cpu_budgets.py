"""CPU time per invocation, as a workflow has it: each step and each stretch of run() between steps
gets the budget, not the context's whole life (docs/decisions.md); and the Python runtime's limit
holds against a worker that lifts whatever its own process sets (docs/security.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from sumi.runtime import InvokeResult, Limits, PyRuntime
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, py, py_queue
from tests.unit.runtime.workflow_testkit import Workflows, js_run, py_run, wf

__all__ = ["wf"]  # the fixture, parametrized over javascript and python

BUDGET_MS = 800
BUDGET = Limits(cpu_ms=BUDGET_MS, wall_ms=60_000)

# Burning CPU for a time: Python by its process's CPU clock; JavaScript has none in the sandbox,
# so by the wall clock, which spends at most that much CPU (less if the machine is busy).
JS_BURN = "const burn = (ms) => { const end = Date.now() + ms; let x = 0; while (Date.now() < end) x++; return x; };"
PY_BURN = """import time


def burn(ms):
    end = time.process_time() + ms / 1000
    while time.process_time() < end:
        pass
"""


def _steps(n: int, burn_ms: int) -> tuple[str, str]:
    js = f"""for (let i = 0; i < {n}; i++) await step.do(`s${{i}}`, async () => {{ burn({burn_ms}); return {{ i }}; }});
return {{ steps: {n} }};"""
    py = f"""for i in range({n}):
    await step.do(f"s{{i}}", lambda: burn({burn_ms}) or {{"i": i}})
return {{"steps": {n}, "cpu_ms": int(time.process_time() * 1000)}}"""
    return js_run(js, JS_BURN), py_run(py, PY_BURN)


async def test_steps_whose_total_exceeds_one_budget_complete(wf: Workflows) -> None:  # WF-45, WF-48
    js, py = _steps(6, BUDGET_MS * 40 // 100)
    run = await wf.run(js, py, limits=BUDGET)
    assert run.outcome.kind == "complete", run.outcome
    assert run.outcome.output["steps"] == 6
    assert [name for _, name in run.host.steps_called()] == [f"s{i}" for i in range(6)]
    if wf.lang == "py":  # the child's own CPU clock: well past one budget in all
        assert run.outcome.output["cpu_ms"] > 2 * BUDGET_MS


async def test_one_step_over_the_budget_stops_the_context(wf: Workflows) -> None:  # WF-45, WF-48
    js, py = _steps(2, BUDGET_MS * 150 // 100 if wf.lang == "py" else BUDGET_MS * 5)
    run = await wf.run(js, py, limits=BUDGET)
    assert (run.outcome.kind, run.outcome.reason) == ("stopped", "cpu_limit"), run.outcome
    assert run.host.steps_called() == []  # the first effect never finished


async def test_run_code_after_a_step_has_one_budget(wf: Workflows) -> None:  # WF-45
    js = js_run("await step.do('a', async () => 1);\nburn(5000);\nreturn 1;", JS_BURN)
    py = py_run("await step.do('a', lambda: 1)\nburn(5000)\nreturn 1", PY_BURN)
    run = await wf.run(js, py, limits=BUDGET)
    assert (run.outcome.kind, run.outcome.reason) == ("stopped", "cpu_limit"), run.outcome


# ---- the Python limit, from outside the worker's process (docs/security.md) ----

LIFT = """import os, resource, signal, time
signal.setitimer(signal.ITIMER_PROF, 0)
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
signal.signal(signal.SIGPROF, signal.SIG_IGN)
soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
try:
    resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
except (ValueError, OSError):
    pass
"""


@pytest.fixture(scope="module")
async def pyrt() -> AsyncIterator[PyRuntime]:
    runtime = PyRuntime()
    await runtime.start()
    yield runtime
    await runtime.close()


SMALL = Limits(cpu_ms=500, wall_ms=20_000)  # a spin that outlives the wall limit ends `wall_limit`


async def _queue(rt: PyRuntime, body: str) -> InvokeResult:
    ctx = await rt.start_context(py(py_queue(body)), "worker.py", SMALL, Host())
    try:
        return await asyncio.wait_for(ctx.invoke_queue(batch(), ENV), 30)
    finally:
        await ctx.stop()


async def test_a_worker_that_lifts_its_own_cpu_limits_is_stopped(pyrt: PyRuntime) -> None:  # QC-32
    result = await _queue(pyrt, LIFT + "while True:\n    pass")
    assert (result.ok, result.reason) == (False, "cpu_limit"), result


async def test_cpu_of_a_forked_process_counts(pyrt: PyRuntime) -> None:  # QC-32
    # The parent idles; the process it forks spins. The context is all of its processes: where
    # the seccomp filter stands (x86_64, aarch64: sumi.runtime._confine) the fork is refused,
    # elsewhere the child's CPU counts against the context.
    body = LIFT + "if os.fork() == 0:\n    while True:\n        pass\nawait asyncio.sleep(600)"
    result = await _queue(pyrt, "import asyncio\n" + body)
    refused = (False, "threw", "PermissionError")
    assert (result.ok, result.reason) == (False, "cpu_limit") or (
        result.ok,
        result.reason,
        result.error_name,
    ) == refused, result


async def test_the_hard_cpu_rlimit_cannot_be_raised(pyrt: PyRuntime) -> None:  # QC-32
    body = """import resource
soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
assert soft == hard != resource.RLIM_INFINITY, (soft, hard)
try:
    resource.setrlimit(resource.RLIMIT_CPU, (hard + 10, hard + 10))
except (ValueError, OSError):
    pass
else:
    raise RuntimeError("the worker raised its hard CPU limit")"""
    result = await _queue(pyrt, body)
    assert result.ok, result


async def test_a_workflow_step_that_lifts_its_limits_is_stopped(pyrt: PyRuntime) -> None:  # WF-45
    wf = Workflows("py", pyrt)
    py_src = py_run("def spin():\n    while True:\n        pass\nawait step.do('spin', spin)", LIFT)
    run = await wf.run("", py_src, limits=SMALL)
    assert (run.outcome.kind, run.outcome.reason) == ("stopped", "cpu_limit"), run.outcome
