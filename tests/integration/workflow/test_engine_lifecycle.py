"""Terminate, retention, delete, bindings and a Python workflow, on the real broker."""

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

import pytest

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.wire import codec
from sumi.workflow import commands as c
from sumi.workflow.engine import Engine
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import SPACE, engine_bench, reader, until

pytestmark = pytest.mark.integration

LONG = """
export class Flow {
  async run(event, step) {
    await step.do('forever', async () => { await new Promise((resolve) => setTimeout(resolve, 60000)); });
    return {};
  }
}
"""

QUICK = """
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    if (event.params && event.params.child) return { child: true };
    const child = await step.do('spawn', async () => {
      const inst = await this.env.SELF.create({ params: { child: true } });
      return { id: inst.id };
    });
    return { spawned: typeof child.id };
  }
}
"""

ONE = """
export class Flow { async run(event, step) { return { one: 1 }; } }
"""

PY = """
class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        a = await step.do("a", lambda: {"v": event["params"]["n"] * 2})
        await step.sleep("nap", 0)
        return {"v": a["v"]}
"""


def new(kafka_bootstrap: str, database_url: str, **overrides: object) -> Settings:
    return new_settings(kafka_bootstrap, database_url, **overrides)


async def test_terminate_is_answered_after_the_physical_stop(kafka_bootstrap: str, database_url: str) -> None:
    # WF-26, WF-46
    async with engine_bench(new(kafka_bootstrap, database_url)) as (b, _):
        await b.deploy(LONG)
        assert (await b.create("t1")).accepted
        await until(lambda: b.log.of("t1", r.InstanceContextStarted), 60)
        answer = await b.decided(c.TerminateInstance(b.workflow_uid, "t1"))
        assert (answer.accepted, json.loads(answer.result or "")) == (True, {"id": "t1", "status": "terminated"})
        assert b.log.status("t1") == "terminated" and b.log.of("t1", r.StepAttemptCommitted) == []
        again = await b.decided(c.TerminateInstance(b.workflow_uid, "t1"))  # already terminal: success
        assert again.accepted and json.loads(again.result or "")["status"] == "terminated"
        late = await b.event("t1", "x")
        assert json.loads(late.problem or "")["code"] == "instance_terminal"  # WF-23


async def test_retention_purges_terminal_instances_by_a_durable_timer(kafka_bootstrap: str, database_url: str) -> None:
    # WF-47 (the period is a setting; 2 s only with the test-only opt-in), WF-20
    settings = new(kafka_bootstrap, database_url, workflow_retention_seconds=2, nonconformant_test_settings=True)
    async with engine_bench(settings) as (b, engine):
        await b.deploy(ONE)
        assert (await b.create("r1")).accepted
        await b.status("r1", "complete")
        await until(lambda: b.log.of("r1", r.InstancePurged), 30)
        assert f"{b.workflow_uid}/r1" not in engine.instances
        unknown = await b.event("r1", "x")
        assert json.loads(unknown.problem or "")["code"] == "unknown_instance"
        assert (await b.create("r1")).accepted  # the ID may be used again once purged


async def test_a_binding_creates_instances_from_a_run(kafka_bootstrap: str, database_url: str) -> None:
    # WF-18, WF-19 (an omitted ID is issued by the Host)
    async with engine_bench(new(kafka_bootstrap, database_url)) as (b, engine):
        wf = await b.deploy(QUICK, binding="SELF")
        assert (await b.create("parent")).accepted
        assert await b.status("parent", "complete", "errored") == "complete"
        children = [x for x in b.log.records if isinstance(x, r.InstanceCreated) and x.instanceId != "parent"]
        assert len(children) == 1 and children[0].params == '{"child":true}' and children[0].workflowUid == wf
        await b.status(children[0].instanceId, "complete")
        assert engine.instances[f"{wf}/{children[0].instanceId}"].output == '{"child":true}'


async def test_a_python_workflow_runs_through_the_same_engine(kafka_bootstrap: str, database_url: str) -> None:
    # WF-29, WF-36, WF-42 (python runtime, representative)
    async with engine_bench(new(kafka_bootstrap, database_url)) as (b, _):
        await b.deploy(PY, runtime="python")
        assert (await b.create("py1", {"n": 21})).accepted
        assert await b.status("py1", "complete", "errored", timeout=90) == "complete"
        (done,) = [x for x in b.log.of("py1", r.InstanceStatusChanged) if x.status == "complete"]
        assert done.output == '{"v":42}'


async def test_delete_stops_purges_and_reports(kafka_bootstrap: str, database_url: str) -> None:
    # WF-13, WF-14, WF-15
    settings = new(kafka_bootstrap, database_url)
    async with engine_bench(settings) as (b, engine):
        wf = await b.deploy(LONG)
        for iid in ("d1", "d2"):
            assert (await b.create(iid)).accepted
        await until(lambda: all(b.log.of(i, r.InstanceContextStarted) for i in ("d1", "d2")), 60)
        op = f"op_{uuid.uuid4().hex[:8]}"
        now = 1
        await b._send("control", SPACE, r.OperationStarted(op, "delete", SPACE, wf, 2, "alice", now))
        await b._send("control", SPACE, r.OperationStateChanged(op, SPACE, "running", "none", now))
        await b._send("control", SPACE, r.ResourceStateChanged(wf, SPACE, "deleting", now))
        # A marker per partition, each partition's commits on its own outbox: wait for both purges.
        await until(
            lambda: {x.instanceId for x in b.log.records if isinstance(x, r.InstancePurged)} >= {"d1", "d2"}, 60
        )
        assert {x.instanceId for x in b.log.records if isinstance(x, r.InstancePurged)} == {"d1", "d2"}
        assert not engine.runs and not [k for k in engine.instances if k.startswith(wf)]
        assert [x for x in b.log.records if isinstance(x, r.StepAttemptCommitted)] == []  # stopped, not finished
        reports = await _reports(settings, op, settings.partitions)
        # one share per partition, an empty partition's included
        assert sorted(x["partition"] for x in reports) == list(range(settings.partitions))
        assert {x["outcome"] for x in reports} == {"succeeded"}
        refused = await b.create("d3")
        assert json.loads(refused.problem or "")["code"] == "not_found"  # intake closed


async def _reports(settings: Settings, op: str, count: int) -> list[dict[str, object]]:
    """The engine's first `count` operation.report commands for `op`, read from the control command topic."""
    consumer = reader(settings, "commands")
    await consumer.start()
    found: list[dict[str, object]] = []
    try:
        for _ in range(200):
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                for m in messages:
                    rec = codec.decode(m.value)
                    if isinstance(rec, r.CommandSubmitted) and rec.kind == "operation.report":
                        payload: dict[str, object] = json.loads(rec.payload)
                        if payload["operationId"] == op:
                            found.append(payload)
            if len(found) >= count:
                return found
        raise TimeoutError(f"{len(found)} reports of {count}")
    finally:
        await consumer.stop()


STARTER = """
export default {
  async queue(batch, env) {
    for (const m of batch.messages) {
      const inst = await env.FLOWS.create({ id: `from-${m.id}`, params: { n: 7 } });
      await inst.sendEvent({ type: 'go', payload: { k: 1 } });
    }
  },
};
export class Flow {
  async run(event, step) {
    const e = await step.waitForEvent('w', { type: 'go', timeoutSeconds: 60 });
    return { n: event.params.n, k: e.k };
  }
}
"""


async def test_a_queue_handler_starts_instances_through_its_binding(kafka_bootstrap: str, database_url: str) -> None:
    # WF-18, WF-23 from a queue handler: the queue engine submits commands, the workflow engine decides
    from sumi.control.rules.forms.names import QUEUE_CONSUMER
    from sumi.queue.engine import Engine as QueueEngine
    from sumi.workflow.client import WorkflowClient

    settings = new(kafka_bootstrap, database_url)
    async with engine_bench(settings) as (b, _):
        wf = await b.deploy(STARTER, queue_binding="UNUSED", binding="FLOWS", handlers=["queue"])
        consumer_spec = {
            "queue": {"resourceUid": b.queue_uid},
            "worker": {"resourceUid": b.worker_uid},
            "maxBatchSize": 10,
            "maxBatchTimeoutSeconds": 0,
            "maxConcurrency": 1,
            "maxRetries": 3,
            "retryDelaySeconds": 0,
        }
        await b.resource(f"res_c{uuid.uuid4().hex[:8]}", QUEUE_CONSUMER, consumer_spec)
        queue_engine = QueueEngine(settings, WorkflowClient(settings))
        task = asyncio.create_task(queue_engine.run())
        try:
            now = int(time.time() * 1000)
            await b._send("queue", b.queue_uid, r.MessageAccepted(b.queue_uid, SPACE, "msg_1", b"x", now, now))
            assert await b.status("from-msg_1", "complete", "errored", timeout=90) == "complete"
            (done,) = [x for x in b.log.of("from-msg_1", r.InstanceStatusChanged) if x.status == "complete"]
            assert done.output == '{"k":1,"n":7}'
            (created,) = b.log.of("from-msg_1", r.InstanceCreated)
            assert (
                created.workflowUid == wf and created.principal is not None and created.principal.startswith("worker:")
            )
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def test_a_runtime_that_fails_is_retried_with_a_growing_delay_not_in_a_loop(
    kafka_bootstrap: str, database_url: str
) -> None:
    # WF-41: the instance replays in a new context once the runtime serves again; meanwhile its
    # retries back off (100 ms, doubling), so a broken runtime costs neither a busy loop nor a flood
    # of context records.
    class Broken(Engine):
        broken = True

        async def runtime(self, kind: str, space: str = "") -> Any:
            if self.broken:
                raise RuntimeError("the runtime process did not start")
            return await super().runtime(kind, space)

    settings = new_settings(kafka_bootstrap, database_url)
    async with engine_bench(settings, engine_cls=Broken) as (b, engine):
        await b.deploy(ONE)
        iid = f"i-{uuid.uuid4().hex[:6]}"
        assert (await b.create(iid)).accepted
        await asyncio.sleep(2.0)
        tries = len(b.log.of(iid, r.InstanceContextStarted))
        assert 2 <= tries <= 6, tries  # 0, 0.1, 0.3, 0.7, 1.5 s: five at most in 2 s
        assert b.log.status(iid) == "running"
        engine.broken = False  # type: ignore[attr-defined]
        assert await b.status(iid, "complete", "errored", timeout=60) == "complete"
