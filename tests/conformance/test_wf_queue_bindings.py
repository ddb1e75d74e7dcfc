"""A queue handler drives instances through its Caller Binding `env.WF` only (WF-18..23, WF-26),
over the real Host: create, get, `status()` polled every 250 ms until the instance ends,
`sendEvent` and `terminate()`. Every status the handler reads is the document the HTTP API
gives for the same instance: the output and error message opened, never sealed text, and never
a Host failure reported as `backend_unavailable` (issue 40)."""

import base64
import json
import uuid
from typing import Any

import pytest

from tests.conformance.kit import Api, Flows
from tests.conformance.modes import engine_mode_host  # noqa: F401 (every test in both engine modes)
from tests.httpkit import DEPLOYMENT, WORKFLOW

pytestmark = pytest.mark.integration

FLOW_JS = """
export default {};
export class Flow {
  async run(event, step) {
    const p = event.params ?? {};
    if (p.mode === "throw") throw new Error("boom");
    if (p.mode === "wait") return { got: await step.waitForEvent("w", { type: "go", timeoutSeconds: 3600 }) };
    if (p.mode === "sleep") { await step.sleep("nap", 3600); return {}; }
    const r = await step.do("double", async () => ({ n: p.n * 2 }));
    return { n: r.n, id: event.instanceId };
  }
}
"""

# Each message names a case; what the handler saw goes to REPORT, every failure caught by name.
DRIVER_JS = """
const dec = new TextDecoder();
const TERMINAL = ["complete", "errored", "terminated"];
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(inst, wanted, seen) {
  for (let i = 0; i < 240; i++) {
    const s = await inst.status();
    if (seen[seen.length - 1] !== s.status) seen.push(s.status);
    if (wanted.includes(s.status)) return s;
    await pause(250);
  }
  return { timedOut: true };
}

async function drive(env, c) {
  const created = await env.WF.create({ id: c.id, params: c.params });
  const inst = await env.WF.get(created.id);
  const out = {
    created: created.id,
    got: inst.id,
    methods: ["status", "sendEvent", "terminate"].map((m) => typeof inst[m]),
    seen: [],
  };
  if (c.case === "event") {
    out.before = await until(inst, ["waiting"], out.seen);
    await inst.sendEvent({ type: "go", payload: { k: 1 } });
  }
  if (c.case === "terminate") {
    out.before = await until(inst, ["sleeping"], out.seen);
    await inst.terminate();
  }
  out.final = await until(inst, TERMINAL, out.seen);
  return out;
}

export default {
  async queue(batch, env) {
    for (const m of batch.messages) {
      const c = JSON.parse(dec.decode(m.body));
      let out;
      try { out = await drive(env, c); } catch (e) { out = { thrown: { name: e.name, message: e.message } }; }
      await env.REPORT.send(JSON.stringify({ case: c.case, ...out }));
    }
  },
};
"""

CASES = {
    "complete": {"n": 21},
    "errored": {"mode": "throw"},
    "event": {"mode": "wait"},
    "terminate": {"mode": "sleep"},
}


async def _driver(api: Api, flows: str, report: str) -> str:
    """A queue worker bound to the Workflow (`env.WF`) and to REPORT, consuming a fresh queue."""
    worker = await api.worker(source=DRIVER_JS, deploy=False)
    version = await api.version(worker, DRIVER_JS, {"REPORT": report}, workflow_bindings={"WF": flows})
    deployment = {
        "worker": {"resourceUid": worker},
        "versions": [{"version": {"resourceUid": version}, "percentage": 100}],
    }
    await api.create(f"d-{uuid.uuid4().hex[:8]}", DEPLOYMENT, deployment)
    queue = await api.queue()
    await api.consumer(queue, worker, maxConcurrency=len(CASES), maxBatchSize=1, maxRetries=0)
    return queue


async def _reports(api: Api, queue: str, count: int, timeout: float = 120) -> dict[str, dict[str, Any]]:
    import asyncio

    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        seen = [json.loads(base64.b64decode(m["body"])) for m in await api.peek(queue)]
        if len(seen) >= count:
            return {s.pop("case"): s for s in seen}
        assert asyncio.get_running_loop().time() < deadline, seen
        await asyncio.sleep(0.2)


async def test_a_queue_handler_drives_instances_through_env_wf(api: Api) -> None:
    # WF-18, WF-19, WF-20, WF-21, WF-22, WF-23, WF-26
    w = await api.worker(source=FLOW_JS, handlers=())
    flows = Flows(
        api,
        await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": w}, "className": "Flow"}),
    )
    report = await api.queue()
    queue = await _driver(api, flows.uid, report)
    tag = uuid.uuid4().hex[:6]
    ids = {case: f"{case}-{tag}" for case in CASES}
    await api.send(queue, *(json.dumps({"case": c, "id": ids[c], "params": p}) for c, p in CASES.items()))
    reports = await _reports(api, report, len(CASES))
    for case, seen in reports.items():
        assert "thrown" not in seen, (case, seen)
        assert seen["created"] == seen["got"] == ids[case], seen
        assert seen["methods"] == ["function"] * 3, seen
        # What the binding answered is what the Host answers over HTTP (the output opened).
        over_http = (await flows.get(ids[case])).json()
        assert seen["final"] == {k: v for k, v in over_http.items() if k != "id"}, (case, seen, over_http)
    assert reports["complete"]["final"] == {"status": "complete", "output": {"n": 42, "id": ids["complete"]}}
    errored = reports["errored"]["final"]
    assert errored["status"] == "errored" and "output" not in errored, errored
    assert errored["error"]["reason"] == "run_threw" and "boom" in errored["error"].get("message", ""), errored
    assert reports["event"]["before"] == {"status": "waiting"}
    assert reports["event"]["final"] == {"status": "complete", "output": {"got": {"k": 1}}}
    assert reports["terminate"]["before"] == {"status": "sleeping"}
    assert reports["terminate"]["final"] == {"status": "terminated"}
    assert all(s["seen"][-1] == s["final"]["status"] for s in reports.values()), reports
