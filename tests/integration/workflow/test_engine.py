"""The workflow engine on the real broker with real JS workflow classes."""

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.wire import codec
from sumi.workflow.engine import Engine
from sumi.workflow.rules import _decide as d
from tests.hostkit import committed_messages, new_settings
from tests.integration.workflow.engine_kit import Bench, engine_bench

pytestmark = pytest.mark.integration

FLOW = """
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const a = await step.do('a', async () => ({ n: event.params.n + 1 }));
    await step.sleep('nap', 1);
    const e = await step.waitForEvent('w', { type: 'go', timeoutSeconds: 60 });
    let caught = null;
    try {
      await step.do('b', async () => { throw new Error('flaky'); }, { maxAttempts: 2 });
    } catch (err) { caught = err.name; }
    return { a: a.n, e: e ?? null, caught };
  }
}
"""


@pytest.fixture(params=[False, True], ids=["normal", "always-replay"])
async def bench(
    request: pytest.FixtureRequest, kafka_bootstrap: str, database_url: str
) -> AsyncIterator[tuple[Bench, Engine]]:
    settings = new_settings(kafka_bootstrap, database_url)
    async with engine_bench(settings, d.Limits(always_replay=request.param)) as pair:
        yield pair


async def test_an_instance_runs_through_do_sleep_wait_and_retry(bench: tuple[Bench, Engine]) -> None:
    # WF-29, WF-36, WF-40, WF-41, WF-42, WF-43, WF-45, WF-46
    b, _ = bench
    await b.deploy(FLOW)
    iid = f"i-{uuid.uuid4().hex[:6]}"
    created = await b.create(iid, {"n": 1})
    assert created.accepted and created.status == 201
    assert await b.status(iid, "waiting") == "waiting"
    sent = await b.event(iid, "go", {"ok": True})
    assert sent.accepted and sent.status == 202
    assert await b.status(iid, "complete", "errored") == "complete"
    (done,) = [x for x in b.log.of(iid, r.InstanceStatusChanged) if x.status == "complete"]
    assert done.output == '{"a":2,"caught":"step_failed","e":{"ok":true}}'
    statuses = [x.status for x in b.log.of(iid, r.InstanceStatusChanged)]
    # sleeping is published only if the 1 s sleep is still ahead once the context has stopped (WF-46)
    assert statuses[0] == "running" and "waiting" in statuses and statuses[-1] == "complete"
    assert set(statuses) <= {"running", "sleeping", "waiting", "complete"}
    attempts = [(x.name, x.attempt, x.ok) for x in b.log.of(iid, r.StepAttemptCommitted)]
    assert attempts == [("a", 1, True), ("nap", 1, True), ("w", 1, True), ("b", 1, False), ("b", 2, False)]
    again = await b.create(iid)
    assert not again.accepted and again.status == 409  # WF-19
    contexts = len(b.log.of(iid, r.InstanceContextStarted))
    if bench[1].limits.always_replay:  # every step after the first reached by replay (WF-32, WF-36)
        assert contexts >= 6
    else:  # first run, after the sleep, after the event, after the failed attempt (WF-41)
        assert contexts == 4


async def test_timers_and_instances_survive_an_engine_restart(
    kafka_bootstrap: str, database_url: str
) -> None:  # WF-42, WF-43, WF-46: durable timers fire once, after a restart too
    settings = new_settings(kafka_bootstrap, database_url)
    iid = "restart-1"
    async with engine_bench(settings) as (b, _):
        await b.deploy(FLOW.replace("step.sleep('nap', 1)", "step.sleep('nap', 3)"))
        assert (await b.create(iid, {"n": 5})).accepted
        await b.status(iid, "sleeping")
    async with engine_bench(settings) as (b2, engine):  # a new engine process: rebuilt from the log
        b2.workflow_uid = b.workflow_uid
        assert engine is not None
        await b2.status(iid, "waiting")
        assert (await b2.event(iid, "go")).accepted
        assert await b2.status(iid, "complete", "errored") == "complete"
        naps = [x for x in b2.log.of(iid, r.StepAttemptCommitted) if x.name == "nap"]
        assert len(naps) == 1  # fired once
        (done,) = [x for x in b2.log.of(iid, r.InstanceStatusChanged) if x.status == "complete"]
        assert done.output == '{"a":6,"caught":"step_failed","e":null}'


async def _committed(settings: Settings, topic: str) -> list[Any]:
    """Every committed message of one of the Host's topics, with its partition and offset."""
    return await committed_messages(settings, topic)


async def test_a_create_and_its_first_context_start_commit_in_one_transaction(
    kafka_bootstrap: str, database_url: str
) -> None:
    # WF-29, WF-33: an instance created while a context is free records its context start in the
    # create's own transaction, so it runs one commit sooner: no commit marker (which takes an
    # offset of its own) lies between its InstanceCreated and its InstanceContextStarted
    settings = new_settings(kafka_bootstrap, database_url)
    async with engine_bench(settings) as (b, _):
        await b.deploy(FLOW)
        iid = f"i-{uuid.uuid4().hex[:6]}"
        assert (await b.create(iid, {"n": 1})).accepted
        assert await b.status(iid, "waiting") == "waiting"
        messages = await _committed(settings, "workflow")
    ours = [(m.partition, m.offset, codec.decode(m.value)) for m in messages]
    created = next((p, o) for p, o, rec in ours if isinstance(rec, r.InstanceCreated) and rec.instanceId == iid)
    started = next((p, o) for p, o, rec in ours if isinstance(rec, r.InstanceContextStarted) and rec.instanceId == iid)
    assert created[0] == started[0] and created[1] < started[1]
    between = [o for p, o, _ in ours if p == created[0] and created[1] <= o <= started[1]]
    assert between == list(range(created[1], started[1] + 1))
