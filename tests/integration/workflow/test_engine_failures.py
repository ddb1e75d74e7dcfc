"""No failure loops (WF-41, WF-45, WF-22): a context that dies the same way at the same step,
again and again, ends its instance instead of re-running the step's effect without bound. On
the real engine, broker and JavaScript runtime; the failure is a Host bug injected on purpose."""

import asyncio
from typing import Any

import pytest

from sumi.core import records as r
from sumi.workflow import engine as engine_module
from sumi.workflow._runs import ContextRun
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import engine_bench

pytestmark = pytest.mark.integration

FLOW = """
export class Flow {
  async run(event, step) {
    const a = await step.do('fine', async () => ({ v: 1 }));
    await step.do('doomed', async () => ({ v: 2 }));
    return { a };
  }
}
"""


class BuggyRun(ContextRun):
    """A Host whose commit of the step 'doomed' always fails: the runtime sees
    backend_unavailable, gives the run up (suspended) and a new context replays the step."""

    effects = 0  # how often the effect of 'doomed' ran (it runs right before each such call)

    async def _call(self, method: str, args: dict[str, Any]) -> Any:
        if method == "step.do" and args.get("name") == "doomed":
            BuggyRun.effects += 1
            raise RuntimeError("a bug in the Host")
        return await super()._call(method, args)


async def test_the_same_failure_of_the_same_attempt_ends_the_instance(
    kafka_bootstrap: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WF-41, WF-22: bounded re-runs, then errored run_threw naming the failure, in the history.
    monkeypatch.setattr(engine_module, "ContextRun", BuggyRun)
    async with engine_bench(new_settings(kafka_bootstrap, database_url)) as (b, _):
        await b.deploy(FLOW)
        assert (await b.create("loop")).accepted
        assert await b.status("loop", "complete", "errored", "terminated", timeout=60) == "errored"
        end = b.log.of("loop", r.InstanceStatusChanged)[-1]
        assert end.errorReason == "run_threw"
        assert "3 times in a row" in (end.errorMessage or "") and "a bug in the Host" in (end.errorMessage or "")
        await asyncio.sleep(1)
        assert BuggyRun.effects == 3  # bounded, and nothing after the end
        assert len(b.log.of("loop", r.InstanceContextStarted)) == 3
        assert [s.name for s in b.log.of("loop", r.StepAttemptCommitted)] == ["fine"]  # never re-run
