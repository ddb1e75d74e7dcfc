"""The workflow projection alone: records/s and CPU per step. Run: python -m tests.bench.bench_projections

The instance log is written here as the engine writes it (each instance's data key on the key
topic, then its records, documents sealed): per instance InstanceCreated and its create's
decision, a context's start and `running`, 10 steps, `complete`. The projection is the real
`sumi serve projections` process, on a fresh schema and topics of its own. Two phases:

- paced: BENCH_PROJ_RATE instances/s (default 25, the issue's load: 250 steps/s) for
  BENCH_PROJ_SECONDS (default 30), each live instance advancing one record per 40 ms tick,
  so records of many instances interleave in small polls as they do under live load;
- backlog: BENCH_PROJ_INSTANCES instances (default 2,000) appended while the projection is
  stopped, then timed from its resumption until applied: large polls, the projection's ceiling.

For each: records/s applied, and CPU ms per committed step of the projection process and of
PostgreSQL (the processes of the server this run started; with SUMI_DATABASE_URL set, every
postgres process on the machine, so figures then include whatever else uses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import deque
from typing import Any

import psutil
import psycopg

from sumi.core import records as r
from sumi.core import sealing
from sumi.core.canonical import parsed_canonical
from sumi.core.config import Settings
from sumi.host.bootstrap import prepare
from sumi.testing import new_settings
from sumi.wire import kafka
from sumi.wire.topics import instance_key
from tests.bench._parts import parts
from tests.bench._profile import cpu, profiled

RATE = float(os.environ.get("BENCH_PROJ_RATE", "25"))
SECONDS = float(os.environ.get("BENCH_PROJ_SECONDS", "30"))
BACKLOG = int(os.environ.get("BENCH_PROJ_INSTANCES", "2000"))
STEPS = 10
TICK = 0.04
WF = "wf_bench"


Out = tuple[str, str, Any]  # topic suffix, key, record


def instance_log(iid: str, now: int, ring: sealing.KeyRing) -> deque[list[Out]]:
    """What the engine commits for one instance, transaction by transaction (the key with the
    create), documents sealed as it seals them."""
    key = sealing.new_key(f"dk_{iid}", WF, iid, now)
    ring.add(key)
    k = instance_key(WF, iid)
    plain: list[Any] = [
        r.InstanceCreated(WF, iid, "bench", now, parsed_canonical({"order": iid, "qty": 3}), "alice"),
        r.CommandDecided(
            f"cmd_{iid}",
            "bench",
            "alice",
            "instance.create",
            True,
            201,
            now,
            result=parsed_canonical({"id": iid, "status": "queued"}),
        ),
        r.InstanceContextStarted(WF, iid, "tok", "ver_1", 1, now + 1),
        r.InstanceStatusChanged(WF, iid, "running", now + 1),
    ]
    plain += [
        r.StepAttemptCommitted(
            WF,
            iid,
            f"step-{n}",
            "do",
            1,
            True,
            True,
            now + 2 + n,
            result=parsed_canonical({"n": n, "rows": [1, 2, 3], "note": "x" * 40}),
            ownerToken="tok",
        )
        for n in range(STEPS)
    ]
    plain.append(r.InstanceStatusChanged(WF, iid, "complete", now + 20, parsed_canonical({"done": True})))
    sealed: list[Out] = [("workflow", k, sealing.seal_record(rec, ring)) for rec in plain]
    return deque([[("workflow.keys", key.keyId, key), *sealed[:2]], *([o] for o in sealed[2:])])


RECORDS_PER_INSTANCE = 4 + STEPS + 1  # on the workflow topic (the key is on a topic of its own)


class Writer:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.producer = kafka.new_producer(settings, linger_ms=5)
        self.ring = sealing.KeyRing()
        self.n = 0

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()

    def new(self, tag: str) -> deque[list[Out]]:
        self.n += 1
        return instance_log(f"{tag}-{self.n:06d}", int(time.time() * 1000), self.ring)

    async def put(self, outs: list[Out]) -> None:
        s = self.settings
        futures = [await kafka.send(self.producer, s.topic(t), k, rec, s.partitions) for t, k, rec in outs]
        for f in futures:
            await f


def _next(live: list[deque[list[Out]]]) -> list[Out]:
    """The next commit of each live instance; those at their end leave `live`."""
    outs = [o for txn in live for o in txn.popleft()]
    live[:] = [txn for txn in live if txn]
    return outs


async def paced(w: Writer) -> int:
    first = w.n
    live: list[deque[list[Out]]] = []
    started, due, tick = time.monotonic(), 0.0, time.monotonic()
    while time.monotonic() - started < SECONDS or live:
        if time.monotonic() - started < SECONDS:
            due += RATE * TICK
            while due >= 1:
                live.append(w.new("p"))
                due -= 1
        await w.put(_next(live))
        tick += TICK
        await asyncio.sleep(max(0.0, tick - time.monotonic()))
    return w.n - first


async def backlog(w: Writer) -> int:
    live = [w.new("b") for _ in range(BACKLOG)]
    while live:  # instances interleaved, each one's records in its order
        await w.put(_next(live))
    return BACKLOG


async def applied(settings: Settings) -> int:
    async with await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True) as conn:
        cur = await conn.execute(
            f"SELECT coalesce(sum(next_offset), 0) FROM {settings.db_schema}.projection_offsets "
            "WHERE projection = 'workflow'"
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0


async def wait_applied(settings: Settings, total: int, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while (done := await applied(settings)) < total:
        assert time.monotonic() < deadline, f"projection applied {done} of {total}"
        await asyncio.sleep(0.05)
    return time.monotonic()


def postgres_procs(ours: bool) -> list[psutil.Process]:
    me = psutil.Process()
    pool = me.children(recursive=True) if ours else list(psutil.process_iter())
    out = []
    for p in pool:
        with contextlib.suppress(psutil.Error):
            if p.name().startswith("postgres"):
                out.append(p)
    return out


async def check(settings: Settings, instances: int) -> None:
    async with await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True) as conn:
        s = settings.db_schema
        n = await (await conn.execute(f"SELECT count(*) FROM {s}.workflow_history")).fetchone()
        done = await (
            await conn.execute(f"SELECT count(*) FROM {s}.workflow_instances WHERE status = 'complete'")
        ).fetchone()
        decided = await (await conn.execute(f"SELECT count(*) FROM {s}.decisions")).fetchone()
    want = instances * (RECORDS_PER_INSTANCE - 1)
    assert n is not None and n[0] == want, f"history rows {n} != {want}"
    assert done is not None and done[0] == instances, f"complete {done} != {instances}"
    assert decided is not None and decided[0] == instances, f"decisions {decided} != {instances}"


async def measure(
    settings: Settings, proj: psutil.Process, label: str, run: Any, ours: bool, held: bool = False
) -> int:
    """Times `run` (it writes instances) until the projection has applied them; `held`: the
    projection stopped while they are written, timed from when it goes on (its own pace alone,
    not shared with this writer for the two cores)."""
    procs = {"projection": [proj], "postgres": postgres_procs(ours)}
    before_records = await applied(settings)
    if held:
        proj.suspend()
        instances = await run()
        proj.resume()
    before, t0 = cpu(procs), time.monotonic()
    with profiled({"projections": [proj]}, label):  # BENCH_PROFILE=1
        if not held:
            instances = await run()
        total = before_records + instances * RECORDS_PER_INSTANCE
        end = await wait_applied(settings, total)
    after = cpu(procs)
    records = total - before_records
    steps = instances * STEPS
    out = {
        "phase": label,
        "instances": instances,
        "records": records,
        "seconds": round(end - t0, 2),
        "records/s": round(records / (end - t0)),
        "projection cpu ms/step": round(1000 * (after["projection"] - before["projection"]) / steps, 3),
        "postgres cpu ms/step": round(1000 * (after["postgres"] - before["postgres"]) / steps, 3),
        "load average": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(out), flush=True)
    return instances


async def bench(settings: Settings, ours: bool) -> None:
    await prepare(settings)
    env = {**os.environ, **settings.to_env(), "SUMI_REPLICA": "bench-projections"}
    child = subprocess.Popen([sys.executable, "-m", "sumi.cli", "serve", "projections"], env=env)
    w = Writer(settings)
    await w.start()
    try:
        proj = psutil.Process(child.pid)
        await w.put(
            [o for txn in w.new("warm") for o in txn]
        )  # the consumer joined and the key reader open before timing
        await wait_applied(settings, RECORDS_PER_INSTANCE, timeout=120)
        total = 1
        total += await measure(settings, proj, f"paced {RATE:g}/s for {SECONDS:g}s", lambda: paced(w), ours)
        total += await measure(settings, proj, f"backlog of {BACKLOG}", lambda: backlog(w), ours, held=True)
        await check(settings, total)
    finally:
        await w.stop()
        child.terminate()
        child.wait(timeout=30)


def main() -> None:
    ours = not os.environ.get("SUMI_DATABASE_URL")
    with parts() as (bootstrap, db):
        settings = new_settings(bootstrap, db, partitions=Settings.partitions)
        asyncio.run(bench(settings, ours))


if __name__ == "__main__":
    main()
