"""Every terminate decides, once (WF-26): the windows where a decision went missing, held open
on purpose on the real engine and broker."""

import asyncio
import json

import pytest

from sumi.core import records as r
from sumi.runtime.types import WorkflowOutcome
from sumi.workflow import commands as c
from sumi.workflow import engine as engine_module
from sumi.workflow._runs import ContextRun
from sumi.workflow.engine import Engine
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import engine_bench, until

pytestmark = pytest.mark.integration

FLOW = """
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const target = event.params && event.params.target;
    if (target) {
      const other = await this.env.SELF.get(target);
      await step.do('stop it', async () => { await other.terminate(); });
      return await step.do('its status', async () => other.status());
    }
    await step.do('forever', async () => { await new Promise((resolve) => setTimeout(resolve, 60000)); });
    return {};
  }
}
"""


class LateRun(ContextRun):
    """A run whose task takes its first step late, as on a loaded machine: registered as live,
    its context start put in the outbox, no context yet."""

    runs: list["LateRun"] = []

    def start(self) -> None:
        begun = self._begin()
        LateRun.runs.append(self)

        async def late() -> None:
            await asyncio.sleep(0.5)
            await self._run(begun)

        self.task = asyncio.create_task(late())


async def test_a_terminate_before_the_context_start_is_decided(
    kafka_bootstrap: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WF-26: the run is live but has no context yet; the terminate stops it and is decided, and
    # no context ever starts for it.
    monkeypatch.setattr(engine_module, "ContextRun", LateRun)
    async with engine_bench(new_settings(kafka_bootstrap, database_url)) as (b, engine):
        await b.deploy(FLOW, binding="SELF")
        assert (await b.create("early")).accepted
        await until(lambda: any(k.endswith("/early") for k in engine.runs), 30)
        answer = await b.decided(c.TerminateInstance(b.workflow_uid, "early"), timeout=10)
        assert (answer.accepted, json.loads(answer.result or "")) == (True, {"id": "early", "status": "terminated"})
        await asyncio.sleep(1)  # the late task has run by now: it started no context
        assert b.log.status("early") == "terminated"
        early = [run for run in LateRun.runs if run.key.endswith("/early")]
        assert len(early) == 1 and early[0].task is not None and early[0].task.done()
        assert early[0].ctx is None
        assert len(b.log.of("early", r.InstanceContextStarted)) == 1  # recorded with the create


class Eager(Engine):
    """A scheduler as quick as it may be: the next context starts the moment a run has ended."""

    async def ended(self, run: ContextRun, outcome: WorkflowOutcome) -> None:
        await super().ended(run, outcome)
        self.scheduler.start_runs(self.now())


async def test_a_terminate_through_the_caller_binding_is_decided_before_any_new_context(
    kafka_bootstrap: str, database_url: str
) -> None:
    # WF-26, WF-18: the binding's terminate is the engine's: no new context of the target slips
    # in between its stop and its decision, and the caller gets the answer.
    async with engine_bench(new_settings(kafka_bootstrap, database_url), engine_cls=Eager) as (b, engine):
        await b.deploy(FLOW, binding="SELF")
        assert (await b.create("target")).accepted
        await until(lambda: b.log.of("target", r.InstanceContextStarted), 60)
        await asyncio.sleep(0.5)  # its effect is running
        assert (await b.create("caller", {"target": "target"})).accepted
        assert await b.status("caller", "complete", "errored", timeout=60) == "complete"
        out = b.log.of("caller", r.InstanceStatusChanged)[-1].output
        assert json.loads(out or "") == {"status": "terminated"}
        assert b.log.status("target") == "terminated"
        await asyncio.sleep(1)
        assert len(b.log.of("target", r.InstanceContextStarted)) == 1
        assert not any(k.endswith("/target") for k in engine.runs)
