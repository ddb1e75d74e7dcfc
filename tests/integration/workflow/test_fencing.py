"""Fencing proof: an engine paused (SIGSTOP) while a new engine took its instances over, then
resumed, commits nothing (WF-14, WF-46)."""

import asyncio
import os
import signal

import pytest

from sumi.core import records as r
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import engine_bench, engine_process, until

pytestmark = pytest.mark.integration

SLOW = """
export class Flow {
  async run(event, step) {
    const first = await step.do('slow', async () => {
      await new Promise((resolve) => setTimeout(resolve, 3000));
      return { at: Date.now() };
    });
    const second = await step.do('after', async () => ({ ok: true }));
    return { first: typeof first.at, second: second.ok };
  }
}
"""


async def test_a_paused_engine_commits_nothing_after_a_new_owner_took_over(
    kafka_bootstrap: str, database_url: str
) -> None:  # WF-14, WF-46
    settings = new_settings(kafka_bootstrap, database_url)
    old = new = None
    try:
        async with engine_bench(settings, in_process=False) as (b, _):
            await b.deploy(SLOW)
            old = engine_process(settings)
            assert (await b.create("fence-1")).accepted
            (started,) = await until(lambda: b.log.of("fence-1", r.InstanceContextStarted), 60)
            await asyncio.sleep(0.5)  # the old context is inside its 3 s effect
            os.kill(old.pid, signal.SIGSTOP)
            new = engine_process(settings)  # its transactional producer fences the old one's
            assert await b.status("fence-1", "complete", "errored", timeout=90) == "complete"
            os.kill(old.pid, signal.SIGCONT)  # its effect ends; it tries to commit the step
            await asyncio.to_thread(old.wait, 30)
            await asyncio.sleep(1)
            owners = [x.ownerToken for x in b.log.of("fence-1", r.InstanceContextStarted)]
            assert owners[0] == started.ownerToken and len(owners) == 2
            by_old = [x for x in b.log.of("fence-1", r.StepAttemptCommitted) if x.ownerToken == started.ownerToken]
            assert by_old == []  # the old owner never committed
            assert [x.name for x in b.log.of("fence-1", r.StepAttemptCommitted)] == ["slow", "after"]
            assert old.returncode != 0  # it ended on being fenced, it did not go on
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
