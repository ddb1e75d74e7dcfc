"""The Host's limits hold before the effect (WF-38), over real HTTP: no effect runs for a step
the Host will refuse. Every effect leaves a trace (a message on the TRACE queue)."""

import uuid

import pytest

from tests.conformance.kit import Api, Flows
from tests.httpkit import WORKFLOW

pytestmark = pytest.mark.integration

STEPS_JS = """
export default {};
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    for (let i = 1; i <= 1025; i++) {
      try {
        await step.do(`s${i}`, async () => { await this.env.TRACE.send(`${i}`); });
      } catch (e) {}  // the limit is no sentinel to catch
    }
    return { lived: true };
  }
}
"""


async def test_the_1025th_step_runs_no_effect(api: Api) -> None:  # WF-38, WF-22
    trace = await api.queue()
    w = await api.worker(source=STEPS_JS, handlers=(), bindings={"TRACE": trace})
    flows = Flows(
        api,
        await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": w}, "className": "Flow"}),
    )
    iid = await flows.started()
    done = await flows.until(iid, "complete", "errored", "terminated", timeout=240)
    assert done["status"] == "errored" and done["error"]["reason"] == "step_limit_exceeded", done
    stats = await api.stats(trace)
    assert stats["ready"] + stats["delayed"] + stats["inFlight"] == 1024, stats
