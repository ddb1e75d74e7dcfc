"""Deleting a DurableWorkflow with live instances, over real HTTP (WF-13..16): intake closed,
contexts stopped, timers cancelled, every instance, history row and unmatched event purged,
and only then the delete's Operation succeeded; `reconciling` with the same Operation while a
context's stop cannot be proven. Every test runs against both engine modes (modes.py).

A step's effect sends a message to a REPORT queue: the observable effect. A step blocked in
a long effect, a sleep and a wait each send one when they go on, so a message that arrives
after the delete succeeded is an effect the delete failed to prevent.
"""

import asyncio
import base64
import json
import os
import signal
import time
import uuid
from typing import Any

import psutil
import psycopg
import pytest

from sumi.core import records as r
from tests.conformance.kit import Api, Flows
from tests.conformance.modes import engine_mode_host  # noqa: F401 (every test in both engine modes)
from tests.hostkit import Host, control_log, every_replica
from tests.httpkit import WORKFLOW, assert_problem

pytestmark = pytest.mark.integration

FLOW_JS = """
export default {};
export class Flow {
  constructor(env) { this.report = env.REPORT; }
  async run(event, step) {
    const p = event.params;
    const say = (what) => this.report.send(`${what}:${event.instanceId}`);
    if (p.mode === "effect") {
      await step.do("slow", async () => {
        await say("started");
        await new Promise((resolve) => setTimeout(resolve, p.ms));
        await say("effect");
        return {};
      });
    } else if (p.mode === "sleep") {
      await step.sleep("nap", p.seconds);
      await step.do("woke", async () => { await say("woke"); return {}; });
    } else {
      await step.waitForEvent("approval", { type: "approved", timeoutSeconds: p.seconds });
      await step.do("waited", async () => { await say("waited"); return {}; });
    }
    return {};
  }
}
"""
TIMER_S = 8  # long enough that the sleep and the wait are still pending when the delete comes
EFFECT_MS = 8000  # long enough that the effect is still going on when the delete comes


async def workflow(api: Api) -> tuple[Flows, str]:
    """A Ready Workflow whose steps report to a queue of their own; (its Flows, the queue)."""
    report = await api.queue()
    w = await api.worker(source=FLOW_JS, handlers=(), bindings={"REPORT": report})
    uid = await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": w}, "className": "Flow"})
    return Flows(api, uid), report


async def reported(api: Api, queue: str) -> list[str]:
    return sorted(base64.b64decode(m["body"]).decode() for m in await api.peek(queue))


async def until_reported(api: Api, queue: str, want: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while want not in await reported(api, queue):
        assert time.monotonic() < deadline, await reported(api, queue)
        await asyncio.sleep(0.1)


async def operation(api: Api, op_id: str) -> dict[str, Any]:
    r = await api.c.get(f"/v2/operations/{op_id}", headers=api.h)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def read_model_rows(host: Host, uid: str) -> dict[str, int]:
    """The workflow read models' rows of `uid` (instances, history, counts)."""
    s = host.settings
    async with await psycopg.AsyncConnection.connect(
        s.database_url, autocommit=True, options=f"-c search_path={s.db_schema}"
    ) as conn:
        out = {}
        for table in ("workflow_instances", "workflow_history", "workflow_counts"):
            cur = await conn.execute(f"SELECT count(*) FROM {table} WHERE workflow_uid = %s", (uid,))  # noqa: S608
            row = await cur.fetchone()
            out[table] = row[0] if row else -1
        return out


async def assert_gone(flows: Flows, host: Host, *iids: str) -> None:
    """WF-13: every instance path of a deleted Workflow is not_found, and nothing of it is kept."""
    api = flows.api
    assert_problem(await api.get(flows.uid), 404, "not_found")
    assert_problem(await api.c.get(flows.base, headers=api.h), 404, "not_found")  # no list
    for iid in iids:
        assert_problem(await flows.get(iid), 404, "not_found")
        assert_problem(await flows.history(iid), 404, "not_found")
        assert_problem(await flows.event(iid, {"type": "approved"}), 404, "not_found")
        assert_problem(await flows.terminate(iid), 404, "not_found")
    assert_problem(await flows.create(), 404, "not_found")
    # The purge was committed before the success was reported; the read models follow it: no
    # instance, history row (the unmatched event's included) or count of the UID is left.
    deadline = time.monotonic() + 30
    while (rows := await read_model_rows(host, flows.uid)) != dict.fromkeys(rows, 0):
        assert time.monotonic() < deadline, rows
        await asyncio.sleep(0.1)


async def test_delete_with_running_sleeping_and_waiting_instances(api: Api, host: Host) -> None:
    # WF-13 (running, sleeping, waiting; unmatched event; timers cancelled), WF-14, WF-15, WF-25
    flows, report = await workflow(api)
    sleeping = await flows.started(id="sleeping", params={"mode": "sleep", "seconds": TIMER_S})
    waiting = await flows.started(id="waiting", params={"mode": "wait", "seconds": TIMER_S})
    timers_from = time.monotonic()
    await flows.until(sleeping, "sleeping")
    await flows.until(waiting, "waiting")
    assert (await flows.event(waiting, {"type": "other"})).status_code == 202  # stays unmatched
    running = await flows.started(id="running", params={"mode": "effect", "ms": TIMER_S * 1000})
    await until_reported(api, report, "started:running")  # inside its long effect
    assert (await flows.get(running)).json()["status"] == "running"
    before = {iid: (await flows.get(iid)).json()["status"] for iid in (sleeping, waiting)}
    assert before == {"sleeping": "sleeping", "waiting": "waiting"}  # no timer has fired yet

    op = await api.done(await api.delete(flows.uid))  # no terminate() first
    assert op["kind"] == "delete" and op["effect"] == "complete"
    done_at = time.monotonic()
    await assert_gone(flows, host, sleeping, waiting, running)

    # No effect after the success: the running step's end, the sleep's wake-up and the wait's
    # timeout would each have sent a message by now, had the delete not stopped and cancelled them.
    await asyncio.sleep(max(0.0, timers_from + TIMER_S + 2 - time.monotonic()))
    assert done_at < timers_from + TIMER_S, "the delete came too late to show the timers were cancelled"
    assert await reported(api, report) == ["started:running"]
    assert (await api.get(report)).status_code == 200  # WF-15: the queue it wrote to stays


def runtime_processes(host: Host) -> list[list[psutil.Process]]:
    """The JavaScript runtime processes (node children, walls or not) of each workflow engine replica."""
    engines = [psutil.Process(pid) for pid in every_replica(host, "workflow")]
    return [[p for p in engine.children(recursive=True) if p.name() == "node"] for engine in engines]


def ended(p: psutil.Process) -> bool:
    return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE


async def test_delete_stays_reconciling_while_the_stop_is_unproven(api: Api, host: Host) -> None:
    # WF-14 (reconciling with the same Operation until the stop is proven), WF-13 (intake closed
    # meanwhile), WF-16 (the same key: the same Operation)
    flows, report = await workflow(api)
    running = await flows.started(id="running", params={"mode": "effect", "ms": EFFECT_MS})
    await until_reported(api, report, "started:running")
    effect_from = time.monotonic()
    by_engine = runtime_processes(host)
    frozen = [p for procs in by_engine for p in procs]
    assert frozen, "no runtime process found"
    for p in frozen:  # the runtime can no longer confirm any stop: a hung process, as far as the Host knows
        os.kill(p.pid, signal.SIGSTOP)
    try:
        assert (await flows.get(running)).json()["status"] == "running"
        assert await reported(api, report) == ["started:running"]  # frozen inside its effect
        key = uuid.uuid4().hex
        first = await api.delete(flows.uid, key=key)
        assert first.status_code == 202, first.text
        op_id = first.json()["id"]
        # Intake is closed while deleting: a create or an event answers as after the delete.
        assert_problem(await flows.create(), 404, "not_found")
        assert_problem(await flows.event(running, {"type": "approved"}), 404, "not_found")
        await asyncio.sleep(2)  # the stop cannot be confirmed: the delete does not succeed
        assert (await operation(api, op_id))["state"] in ("running", "reconciling")
        assert (await api.get(flows.uid)).json()["state"] == "deleting"
        again = await api.delete(flows.uid, key=key)  # WF-16: a retry is the same Operation
        assert again.status_code == 202 and again.json()["id"] == op_id
        # The engine reports the same Operation reconciling and proves the stop by the runtime's
        # exit (a SIGKILL ends even a stopped process); then, and only then, the delete succeeds.
        done = await api.op(op_id, wait=60)
        assert done["state"] == "succeeded" and done["effect"] == "complete", done
        # The runtimes of the replica that ran the instance; another replica's runtimes run others.
        assert any(procs and all(ended(p) for p in procs) for procs in by_engine)
    finally:
        for p in frozen:
            try:
                os.kill(p.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    # The reconciling state may last only as long as the runtime's exit takes, too short to be
    # sure to catch by polling: the control log holds each state the Operation went through.
    log = await control_log(host)
    changes = [x for x in log if isinstance(x, r.OperationStateChanged) and x.id == op_id]
    assert [x.state for x in changes][-2:] == ["reconciling", "succeeded"], changes
    assert changes[-2].effect == "unknown" and json.loads(changes[-2].error or "{}")["code"] == "backend_unavailable"
    started = [x for x in log if isinstance(x, r.OperationStarted) and x.resourceUid == flows.uid]
    assert [x.kind for x in started] == ["create", "delete"]  # one delete Operation, reconciled to its end
    await assert_gone(flows, host, running)
    # The effect would have ended by now, had its context lived on after the SIGCONT.
    await asyncio.sleep(max(0.0, effect_from + EFFECT_MS / 1000 + 1.5 - time.monotonic()))
    assert await reported(api, report) == ["started:running"]
    # The Host runs instances again: the runtime is started anew for the next context.
    again_flows, again_report = await workflow(api)
    await again_flows.started(id="after", params={"mode": "effect", "ms": 0})
    await until_reported(api, again_report, "effect:after")
