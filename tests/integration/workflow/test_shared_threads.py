"""Contexts of one Version share worker threads (the JS runtime's cells): what one instance
does to its thread never costs another instance a step, an attempt or its outcome."""

import asyncio
import json
import uuid
from collections.abc import AsyncIterator

import pytest

from sumi.core import records as r
from sumi.workflow.engine import Engine
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import Bench, engine_bench

pytestmark = pytest.mark.integration

# The bomb fills the heap inside a step; the others sit inside a step long enough to share its thread.
MIXED = """
export class Flow {
  async run(event, step) {
    const first = await step.do('first', async () => ({ at: 1 }));
    if (event.params.bomb) {
      await step.do('bomb', async () => { const a = []; for (;;) a.push(new Array(1 << 16).fill(1)); });
    }
    const slow = await step.do('slow', async () => {
      await new Promise((r) => setTimeout(r, 1500));
      return { ok: true };
    });
    return { first: first.at, slow: slow.ok };
  }
}
"""


@pytest.fixture
async def bench(kafka_bootstrap: str, database_url: str) -> AsyncIterator[tuple[Bench, Engine]]:
    async with engine_bench(new_settings(kafka_bootstrap, database_url)) as pair:
        yield pair


async def test_a_heap_limit_errors_its_own_instance_only(bench: tuple[Bench, Engine]) -> None:
    # WF-32, WF-41, WF-46: a limit stops the context that broke it (run_threw); the contexts that
    # shared its thread are evicted with it, run again alone, replay their committed steps and complete.
    b, _ = bench
    await b.deploy(MIXED)
    tag = uuid.uuid4().hex[:6]
    calm = [f"calm-{tag}-{i}" for i in range(4)]
    bomb = f"bomb-{tag}"
    for iid in calm:
        assert (await b.create(iid, {"bomb": False})).accepted
    await asyncio.sleep(0.3)  # the calm ones are inside `slow` when the heap fills
    assert (await b.create(bomb, {"bomb": True})).accepted
    assert await b.status(bomb, "complete", "errored") == "errored"
    (ended,) = [x for x in b.log.of(bomb, r.InstanceStatusChanged) if x.status == "errored"]
    assert ended.errorReason == "run_threw" and "heap_limit" in (ended.errorMessage or "")
    for iid in calm:
        assert await b.status(iid, "complete", "errored") == "complete"
        (done,) = [x for x in b.log.of(iid, r.InstanceStatusChanged) if x.status == "complete"]
        assert json.loads(done.output or "{}") == {"first": 1, "slow": True}
        # `first` committed once: an eviction replays it, never runs it as a new attempt
        assert [(x.name, x.attempt) for x in b.log.of(iid, r.StepAttemptCommitted)] == [("first", 1), ("slow", 1)]
    evicted = [iid for iid in calm if len(b.log.of(iid, r.InstanceContextStarted)) > 1]
    assert evicted, "no calm instance shared the bomb's thread: the test did not test eviction"
