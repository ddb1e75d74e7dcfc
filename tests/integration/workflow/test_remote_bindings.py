"""Caller Binding calls through the log, as to an instance another replica decides, on the real
broker: one engine owns every partition, and the test setting sends every call that way."""

import json
from typing import Any

import pytest

from sumi.core import records as r
from sumi.core.config import Settings
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import SPACE, Bench, engine_bench, until

pytestmark = pytest.mark.integration

FLOW = """
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const p = event.params || {};
    if (p.role === 'done') return { done: p.n };
    if (p.role === 'wait') return { got: await step.waitForEvent('w', { type: 'go', timeoutSeconds: 120 }) };
    if (p.role === 'long') {
      await step.do('forever', async () => { await new Promise((resolve) => setTimeout(resolve, 60000)); });
      return {};
    }
    if (p.role === 'self') {  // its own terminate: the call waits while its own context is stopped
      await step.do('end me', async () => { await (await this.env.SELF.get(event.instanceId)).terminate(); });
      return { unreachable: true };
    }
    if (p.role === 'timing') {
      const other = await this.env.SELF.get(p.done);
      return await step.do('time', async () => {
        const ms = [];
        for (let i = 0; i < p.n; i++) { const t = Date.now(); await other.status(); ms.push(Date.now() - t); }
        return { ms };
      });
    }
    const code = async (f) => { try { await f(); return 'ok'; } catch (e) { return e.name; } };
    return await step.do('calls', async () => {
      const out = {};
      out.created = (await this.env.SELF.create({ id: p.wait, params: { role: 'wait' } })).id;
      out.duplicate = await code(() => this.env.SELF.create({ id: p.wait }));
      out.unknown = await code(() => this.env.SELF.get('nope'));
      const waiting = await this.env.SELF.get(p.wait);
      out.waitingStatus = (await waiting.status()).status;
      out.event = await code(() => waiting.sendEvent({ type: 'go', payload: { k: 1 } }));
      out.done = await (await this.env.SELF.get(p.done)).status();
      const long = await this.env.SELF.get(p.long);
      out.terminate = await code(() => long.terminate());
      out.longStatus = (await long.status()).status;
      out.terminalEvent = await code(() => long.sendEvent({ type: 'x' }));
      out.terminateAgain = await code(() => long.terminate());
      return out;
    });
  }
}
"""


def remote(kafka_bootstrap: str, database_url: str, **overrides: object) -> Settings:
    return new_settings(
        kafka_bootstrap, database_url, workflow_remote_bindings=True, nonconformant_test_settings=True, **overrides
    )


def output(b: Bench, iid: str) -> Any:
    return json.loads(b.log.of(iid, r.InstanceStatusChanged)[-1].output or "null")


async def test_every_binding_call_is_decided_by_the_owner_through_the_log(
    kafka_bootstrap: str, database_url: str
) -> None:
    # WF-18, WF-19, WF-20, WF-21, WF-23, WF-26: create, get, status, sendEvent and terminate of
    # another instance, and their refusals, answered from the owner's decisions on the log.
    async with engine_bench(remote(kafka_bootstrap, database_url)) as (b, engine):
        await b.deploy(FLOW, binding="SELF")
        assert (await b.create("done", {"role": "done", "n": 5})).accepted
        assert (await b.create("long", {"role": "long"})).accepted
        await b.status("done", "complete")
        await until(lambda: b.log.of("long", r.InstanceContextStarted), 60)
        assert (await b.create("caller", {"wait": "waiting", "done": "done", "long": "long"})).accepted
        assert await b.status("caller", "complete", "errored", timeout=90) == "complete"
        out = output(b, "caller")
        assert out.pop("waitingStatus") in ("queued", "running", "waiting")
        assert out == {
            "created": "waiting",
            "duplicate": "instance_exists",  # WF-19
            "unknown": "unknown_instance",  # WF-20
            "event": "ok",
            "done": {"status": "complete", "output": {"done": 5}},  # WF-21
            "terminate": "ok",
            "longStatus": "terminated",
            "terminalEvent": "instance_terminal",  # WF-23
            "terminateAgain": "ok",  # WF-26: already terminal
        }
        assert await b.status("waiting", "complete", timeout=60) == "complete"
        assert output(b, "waiting") == {"got": {"k": 1}}
        asked = [x for x in b.log.decisions.values() if x.principal.startswith("worker:")]
        # The intake's decisions (a local call's would be named workflow.*), for the caller's Space.
        assert {x.kind for x in asked} == {"instance.create", "instance.status", "instance.event", "instance.terminate"}
        assert {x.space for x in asked} == {SPACE}
        # The status documents are on the log only sealed under the callers' keys.
        assert all(
            (x.result or "").startswith('"sealed1:') for x in asked if x.kind == "instance.status" and x.accepted
        )
        assert not engine.replies.waiting
        assert engine.replies.reader is not None and not engine.replies.reading.is_set()


async def test_a_caller_terminated_while_it_waits_is_cancelled_and_its_command_decided(
    kafka_bootstrap: str, database_url: str
) -> None:
    # WF-26: the caller's own terminate, through the log: its context stops while the call waits;
    # the owner decides the terminate once the stop is proven, and nothing waits any longer.
    async with engine_bench(remote(kafka_bootstrap, database_url)) as (b, engine):
        await b.deploy(FLOW, binding="SELF")
        assert (await b.create("me", {"role": "self"})).accepted
        assert await b.status("me", "terminated", "complete", "errored", timeout=60) == "terminated"
        (decided,) = [x for x in b.log.decisions.values() if x.kind == "instance.terminate"]
        assert decided.accepted and json.loads(decided.result or "") == {"id": "me", "status": "terminated"}
        assert b.log.of("me", r.StepAttemptCommitted) == []
        await until(lambda: not engine.replies.waiting, 10)
