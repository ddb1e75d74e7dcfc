"""Replay proof: workflows whose step.do effects send queue messages run through sleeps, waits,
retries and SIGKILLs of the workflow engine and of its JS runtime.

Every effect's count must equal its committed attempts, or exceed it only by the crashes
between an effect and its commit (WF-41); every output must be right; a completed step
never runs its effect again after its commit (WF-36)."""

import asyncio
import collections
import os
import signal
import time

import pytest

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.wire import codec
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import engine_bench, engine_process, reader

pytestmark = pytest.mark.integration

INSTANCES = 6
KILLS = 6
PROOF = """
export class Proof {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const id = event.instanceId;
    const effect = (name, result, ms = 0) => async () => {
      await this.env.OUT.send(`${id}|${name}`);
      if (ms) await new Promise((resolve) => setTimeout(resolve, ms));
      return result;
    };
    const a = await step.do('a', effect('a', { v: 1 }, 200));
    await step.sleep('nap', 1);
    const b = await step.do('b', effect('b', { v: 2 }, 300));
    const w = await step.waitForEvent('w', { type: 'go', timeoutSeconds: 600 });
    let failed = null;
    try {
      await step.do('flaky', async () => {
        await this.env.OUT.send(`${id}|flaky`);
        throw new Error('always');
      }, { maxAttempts: 3, initialDelaySeconds: 1, backoff: 'exponential' });
    } catch (e) { failed = e.name; }
    const c = await step.do('c', effect('c', { v: 3 }, 200));
    return { sum: a.v + b.v + c.v, w: w.k, failed };
  }
}
"""


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


async def effects(settings: Settings, queue_uid: str) -> collections.Counter[str]:
    consumer = reader(settings, "queue")
    await consumer.start()
    seen: collections.Counter[str] = collections.Counter()
    try:
        idle = 0
        while idle < 5:
            batch = await consumer.getmany(timeout_ms=300)
            idle = 0 if batch else idle + 1
            for messages in batch.values():
                for m in messages:
                    rec = codec.decode(m.value)
                    if isinstance(rec, r.MessageAccepted) and rec.queueUid == queue_uid:
                        seen[rec.body.decode()] += 1
    finally:
        await consumer.stop()
    return seen


async def test_effects_match_committed_attempts_through_engine_and_runtime_kills(
    kafka_bootstrap: str, database_url: str
) -> None:  # WF-36, WF-41, WF-42, WF-43, WF-45, WF-46
    settings = new_settings(kafka_bootstrap, database_url)
    engine = engine_process(settings)
    kills = 0
    try:
        async with engine_bench(settings, in_process=False) as (b, _):
            await b.deploy(PROOF, "Proof", queue_binding="OUT")
            ids = [f"p{i}" for i in range(INSTANCES)]
            for i, iid in enumerate(ids):
                assert (
                    await b.create(
                        iid,
                        {"n": i},
                    )
                ).accepted
                assert (await b.event(iid, "go", {"k": i})).accepted  # queued until the wait consumes it
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and any(b.log.status(i) not in ("complete", "errored") for i in ids):
                await asyncio.sleep(1.5)
                if kills < KILLS:
                    if kills % 2 == 0:  # the engine (its runtime follows it: the pipe closes)
                        os.kill(engine.pid, signal.SIGKILL)
                        engine.wait()
                        engine = engine_process(settings)
                    else:  # the runtime under a live engine: its contexts die mid-effect
                        for pid in children(engine.pid):
                            os.kill(pid, signal.SIGKILL)
                    kills += 1
            statuses = {i: b.log.status(i) for i in ids}
            assert all(s == "complete" for s in statuses.values()), statuses
            for i, iid in enumerate(ids):
                (done,) = [x for x in b.log.of(iid, r.InstanceStatusChanged) if x.status == "complete"]
                assert done.output == f'{{"failed":"step_failed","sum":6,"w":{i}}}'
            seen = await effects(settings, b.queue_uid)
            extra = 0
            for iid in ids:
                committed = collections.Counter(x.name for x in b.log.of(iid, r.StepAttemptCommitted) if x.kind == "do")
                assert committed == {"a": 1, "b": 1, "flaky": 3, "c": 1}
                for name, attempts in committed.items():
                    ran = seen[f"{iid}|{name}"]
                    assert ran >= attempts, (iid, name, ran, attempts)
                    extra += ran - attempts
            # Each kill can interrupt at most one effect per live context between effect and commit.
            assert extra <= kills * INSTANCES, (extra, kills)
            assert kills >= 3
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
