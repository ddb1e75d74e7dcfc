"""CPU time per invocation on the real engine: each step of a workflow gets the budget, so many
steps may spend more than one in all; a step over it ends the instance run_threw (forms.md, Limits)."""

import uuid
from collections.abc import AsyncIterator

import pytest

from sumi.core import records as r
from sumi.workflow.rules import _decide as d
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import Bench, engine_bench

pytestmark = pytest.mark.integration

BUDGET_MS = 800

# Six steps of about 40 % of the budget each; `over` adds one that spins five budgets (wall clock,
# so at least one and a half of CPU on a busy machine).
STEPS = f"""
const burn = (ms) => {{ const end = Date.now() + ms; let x = 0; while (Date.now() < end) x++; return x; }};
export class Flow {{
  async run(event, step) {{
    for (let i = 0; i < 6; i++) {{
      await step.do(`s${{i}}`, async () => {{ burn({BUDGET_MS * 40 // 100}); return {{ i }}; }});
    }}
    if (event.params.over) await step.do('over', async () => {{ burn({BUDGET_MS * 5}); }});
    return {{ steps: 6 }};
  }}
}}
"""

# Issue 21: a Python step that turns off what its own process set, then spins.
LIFTER = """import resource, signal


def spin():
    signal.setitimer(signal.ITIMER_PROF, 0)
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    except (ValueError, OSError):
        pass
    while True:
        pass


class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        await step.do("spin", spin)
"""


@pytest.fixture(params=["normal", "always-replay"])
async def bench(request: pytest.FixtureRequest, kafka_bootstrap: str, database_url: str) -> AsyncIterator[Bench]:
    settings = new_settings(kafka_bootstrap, database_url, runtime_cpu_ms=BUDGET_MS)
    async with engine_bench(settings, d.Limits(always_replay=request.param == "always-replay")) as (b, _):
        yield b


def _ended(b: Bench, iid: str) -> r.InstanceStatusChanged:
    (ended,) = [x for x in b.log.of(iid, r.InstanceStatusChanged) if x.status in ("complete", "errored")]
    return ended


async def test_steps_past_one_budget_in_all_complete(bench: Bench) -> None:  # WF-45, WF-48
    await bench.deploy(STEPS)
    iid = f"steps-{uuid.uuid4().hex[:6]}"
    assert (await bench.create(iid, {"over": False})).accepted
    assert await bench.status(iid, "complete", "errored") == "complete", _ended(bench, iid)
    assert [(x.name, x.attempt) for x in bench.log.of(iid, r.StepAttemptCommitted)] == [(f"s{i}", 1) for i in range(6)]


async def test_a_step_over_the_budget_ends_run_threw(bench: Bench) -> None:  # WF-45, WF-48
    await bench.deploy(STEPS)
    iid = f"over-{uuid.uuid4().hex[:6]}"
    assert (await bench.create(iid, {"over": True})).accepted
    assert await bench.status(iid, "complete", "errored") == "errored"
    ended = _ended(bench, iid)
    assert ended.errorReason == "run_threw" and "cpu_limit" in (ended.errorMessage or ""), ended
    assert len(bench.log.of(iid, r.StepAttemptCommitted)) == 6  # the six before it stand


async def test_a_python_step_that_lifts_its_limits_ends_run_threw(bench: Bench) -> None:  # WF-45
    await bench.deploy(LIFTER, runtime="python")
    iid = f"lifter-{uuid.uuid4().hex[:6]}"
    assert (await bench.create(iid)).accepted
    assert await bench.status(iid, "complete", "errored") == "errored"
    ended = _ended(bench, iid)
    assert ended.errorReason == "run_threw" and "cpu_limit" in (ended.errorMessage or ""), ended
