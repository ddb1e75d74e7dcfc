"""Terminate always has an answer (WF-26): over real HTTP and through the Caller Binding, in every
state an instance can be in, each terminate answers `200` once, and no effect runs after it.

Every effect of these workflows leaves a trace (a message on the TRACE queue), so "no effect
after the answer" is read from the queue's count."""

import asyncio
import uuid
from typing import Any

import pytest

from tests.conformance.kit import Api, Flows
from tests.httpkit import DEPLOYMENT, WORKFLOW

pytestmark = pytest.mark.integration

# The state the instance is terminated in is chosen by params.mode.
FLOW_JS = """
export default {};
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const p = event.params ?? {};
    const trace = (what) => this.env.TRACE.send(`${event.instanceId}:${what}`);
    if (p.mode === "sleep") { await step.sleep("nap", 3600); }
    if (p.mode === "wait") { await step.waitForEvent("w", { type: "go", timeoutSeconds: 3600 }); }
    if (p.mode === "retry") {
      await step.do("flaky", async () => { await trace("flaky"); throw new Error("later"); },
        { maxAttempts: 5, initialDelaySeconds: 3600 });
    }
    for (let i = 0; i < 1000; i++) await step.do(`s${i}`, async () => { await trace(`s${i}`); await pause(200); });
    return {};
  }
}
"""
# The context start itself takes a while: its module's top level runs for 1.5 s.
SLOW_START_JS = "const t0 = Date.now(); while (Date.now() - t0 < 1500) {}\n" + FLOW_JS
# Terminates another instance from one of its steps, through the Caller Binding.
CALLER_JS = """
export default {};
export class Caller {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const target = await this.env.TARGET.get(event.params.target);
    await step.do("stop it", async () => { await target.terminate(); });
    return await step.do("its status", async () => target.status());
  }
}
"""


async def _flows(api: Api, source: str, trace: str) -> Flows:
    w = await api.worker(source=source, handlers=(), bindings={"TRACE": trace})
    spec = {"worker": {"resourceUid": w}, "className": "Flow"}
    return Flows(api, await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, spec))


async def _traces(api: Api, queue: str) -> int:
    return len(await api.peek(queue))


async def _no_effect_after(api: Api, queue: str) -> None:
    """No effect runs once every terminate has answered: the trace count holds still."""
    before = await _traces(api, queue)
    await asyncio.sleep(2)
    assert await _traces(api, queue) == before


async def _terminated(flows: Flows, iid: str) -> None:
    r = await flows.terminate(iid)
    assert r.status_code == 200 and r.json() == {"id": iid, "status": "terminated"}, (iid, r.status_code, r.text)
    assert (await flows.get(iid)).json()["status"] == "terminated"


async def test_terminate_right_after_create_always_answers(api: Api) -> None:  # WF-26, WF-21
    trace = await api.queue()
    flows = await _flows(api, FLOW_JS, trace)
    iids = [f"now-{i}" for i in range(30)]
    for iid in iids:
        assert (await flows.create({"id": iid})).status_code == 201
        await _terminated(flows, iid)
    await _no_effect_after(api, trace)


async def test_terminate_in_every_state_answers(api: Api) -> None:  # WF-26, WF-21, WF-40, WF-42, WF-43
    trace = await api.queue()
    flows = await _flows(api, FLOW_JS, trace)
    states = {"sleep": "sleeping", "wait": "waiting", "retry": "running", "steps": "running"}
    for mode, status in states.items():
        await flows.create({"id": mode, "params": {"mode": mode}})
        await flows.until(mode, status)
    await until_traced(api, trace, "retry:flaky", "steps:s0")  # a retry pending; a step's effect running
    for mode in states:
        await _terminated(flows, mode)
    await _no_effect_after(api, trace)
    again = await flows.terminate("sleep")  # already terminal: success with its status
    assert again.status_code == 200 and again.json() == {"id": "sleep", "status": "terminated"}


async def test_terminate_during_the_context_start_answers(api: Api) -> None:  # WF-26, WF-46
    trace = await api.queue()
    flows = await _flows(api, SLOW_START_JS, trace)
    for i in range(3):
        iid = f"starting-{i}"
        await flows.create({"id": iid})
        await flows.until(iid, "running")  # its context start is committed; the context still loading
        await _terminated(flows, iid)
    await _no_effect_after(api, trace)


async def test_terminate_through_the_caller_binding_answers(api: Api) -> None:  # WF-26, WF-18, WF-20
    trace = await api.queue()
    target = await _flows(api, FLOW_JS, trace)
    worker = await api.worker(source=CALLER_JS, handlers=(), deploy=False)
    version = await api.version(worker, CALLER_JS, workflow_bindings={"TARGET": target.uid})
    deployment = {
        "worker": {"resourceUid": worker},
        "versions": [{"version": {"resourceUid": version}, "percentage": 100}],
    }
    await api.create(f"d-{uuid.uuid4().hex[:8]}", DEPLOYMENT, deployment)
    callers = Flows(api, await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, _caller_spec(worker)))
    modes = ["steps", "sleep", "wait", "retry", "steps", "steps"]
    for i, mode in enumerate(modes):
        iid = f"t{i}"
        await target.create({"id": iid, "params": {"mode": mode}})
        if i % 2:  # half of them while the target is already under way
            await target.until(iid, "running", "sleeping", "waiting")
        await callers.create({"id": f"c{i}", "params": {"target": iid}})
    for i in range(len(modes)):
        done = await callers.until(f"c{i}", "complete", "errored", "terminated")
        assert done == {"id": f"c{i}", "status": "complete", "output": {"status": "terminated"}}, done
        assert (await target.get(f"t{i}")).json()["status"] == "terminated"
    await _no_effect_after(api, trace)


def _caller_spec(worker: str) -> dict[str, Any]:
    return {"worker": {"resourceUid": worker}, "className": "Caller"}


async def until_traced(api: Api, queue: str, *bodies: str, timeout: float = 30) -> None:
    import base64

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        seen = {base64.b64decode(m["body"]).decode() for m in await api.peek(queue)}
        if set(bodies) <= seen:
            return
        assert asyncio.get_running_loop().time() < deadline, seen
        await asyncio.sleep(0.1)
