"""Workflow benchmark beside DBOS Transact. Run: python -m tests.bench.bench_workflow

One 10-step workflow (each step a `step.do` whose effect returns a small document),
measured in one run on the same broker and PostgreSQL:
(a) sumi: the workflow engine as its own process (`sumi serve workflow`) running a JS
    workflow class; instances created through the engine's command topic (what the
    gateway does) and followed on the instance log;
(b) DBOS Transact (`dbos`, the `bench` extra: pip install -e ".[bench]") with the same workflow in Python, its system
    database on the same PostgreSQL;
each at concurrency 1 and 100 (that many instances in flight): instances/s started,
committed steps/s, and p50/p99 of one `step.do` (from the call to its committed
result, measured inside the workflow), then the ratios.
Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psutil

from sumi.core import records as r  # noqa: E402
from sumi.workflow import commands as c  # noqa: E402
from tests.bench._parts import parts
from tests.hostkit import new_settings
from tests.integration.workflow.engine_kit import Bench, engine_bench, engine_process

N1 = int(os.environ.get("BENCH_WF_N1", "30"))
N100 = int(os.environ.get("BENCH_WF_N100", "600"))
STEPS = 10

TEN = """
const now = () => (typeof performance !== 'undefined' ? performance.now() : Date.now());
export class Ten {
  async run(event, step) {
    const lat = [];
    for (let i = 0; i < 10; i++) {
      const t0 = now();
      await step.do('s' + i, async () => ({ i }));
      lat.push(now() - t0);
    }
    return { lat };
  }
}
"""


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))] if s else float("nan")


def figures(name: str, n: int, elapsed: float, started: float, lat: list[float]) -> dict[str, Any]:
    out = {
        "system": name,
        "instances": n,
        "instances_started_per_s": round(n / started, 1),
        "steps_per_s": round(n * STEPS / elapsed, 1),
        "step_p50_ms": round(pct(lat, 50), 2),
        "step_p99_ms": round(pct(lat, 99), 2),
    }
    print(json.dumps(out), flush=True)
    return out


async def pool(n: int, concurrency: int, one: Any) -> float:
    todo = iter(range(n))
    t0 = time.perf_counter()

    async def worker() -> None:
        for i in todo:
            await one(i)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


# ---- sumi -------------------------------------------------------------------------------------


async def sumi_run(b: Bench, n: int, concurrency: int, name: str = "sumi") -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    started: dict[str, float] = {}
    t_start = time.perf_counter()

    async def one(i: int) -> None:
        iid = f"{tag}-{i}"
        ended = b.log.ended(iid)
        await b.submit(c.CreateInstance(b.workflow_uid, iid))
        started[iid] = time.perf_counter()
        assert await asyncio.wait_for(ended, 300) == "complete"

    elapsed = await pool(n, concurrency, one)
    lat: list[float] = []
    first_context = []
    for rec in b.log.records:
        if isinstance(rec, r.InstanceStatusChanged) and rec.status == "complete" and rec.instanceId.startswith(tag):
            lat += json.loads(rec.output or "{}")["lat"][1:]  # the first one also waits for the context start
        if isinstance(rec, r.InstanceContextStarted) and rec.instanceId.startswith(tag) and rec.context == 1:
            first_context.append(rec.at)
    span = (max(first_context) - min(first_context)) / 1000 if len(first_context) > 1 else elapsed
    del t_start
    return figures(f"{name} c={concurrency}", n, elapsed, max(span, 1e-3) * n / max(n - 1, 1), lat)


def cpu_seconds(engine_pid: int) -> dict[str, float]:
    """CPU time so far of each part: the engine process, its JS runtime (node, under its walls),
    the broker, PostgreSQL, and this process (the client, and the log follower)."""
    out = dict.fromkeys(("engine", "js runtime", "kafka", "postgres", "bench client"), 0.0)
    engine = psutil.Process(engine_pid)
    parts = [(engine, "engine"), *((p, "js runtime") for p in engine.children(recursive=True))]
    parts.append((psutil.Process(), "bench client"))
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.info["name"] == "java" and "kafka" in cmd:
            parts.append((p, "kafka"))
        elif (p.info["name"] or "").startswith("postgres"):
            parts.append((p, "postgres"))
    for p, part in parts:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            out[part] += t.user + t.system
    return out


async def sumi_bench(kafka: str, db: str) -> list[dict[str, Any]]:
    settings = new_settings(kafka, db)
    async with engine_bench(settings, in_process=False) as (b, _):
        await b.deploy(TEN, "Ten")
        proc = engine_process(settings)
        try:
            await sumi_run(b, 5, 5)  # warm-up: runtime started, JIT, connections
            one = await sumi_run(b, N1, 1)
            before, t0 = cpu_seconds(proc.pid), time.perf_counter()
            hundred = await sumi_run(b, N100, 100)
            after, elapsed = cpu_seconds(proc.pid), time.perf_counter() - t0
            # Where the time goes at c=100, in cores (2 on the reference machine); the JS runtime
            # starts with the first context, so its processes are found after the warm-up.
            cores = {part: round((after[part] - before[part]) / elapsed, 2) for part in after}
            print(json.dumps({"sumi c=100 cores": cores, "machine cores": os.cpu_count()}), flush=True)
            return [one, hundred]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, 20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class _StubContext:
    """The same 10 steps without a worker runtime: what the engine and the broker alone cost."""

    id = "stub"

    async def invoke_workflow(self, inv: Any, env: Any, host_call: Any) -> Any:
        from sumi.runtime import WorkflowOutcome

        lat = []
        config = {"maxAttempts": 1, "initialDelaySeconds": 0, "backoff": "constant", "maxDelaySeconds": 43200}
        for i in range(STEPS):
            if f"s{i}" in inv.completed:
                continue
            t0 = time.perf_counter()
            args = {"name": f"s{i}", "config": config, "ok": True, "result": {"i": i}}
            reply = await host_call(self.id, "step.do", args)
            lat.append((time.perf_counter() - t0) * 1000)
            if reply.get("action") != "resolve":
                return WorkflowOutcome("suspended")
        return WorkflowOutcome("complete", output={"lat": [0.0, *lat]})

    async def stop(self) -> None:
        pass


class _StubRuntime:
    async def start_context(self, *args: Any, **kw: Any) -> _StubContext:
        return _StubContext()

    async def close(self) -> None:
        pass


async def engine_ceiling(kafka: str, db: str) -> list[dict[str, Any]]:
    from sumi.workflow.engine import Engine

    class StubEngine(Engine):
        async def runtime(self, kind: str, space: str = "") -> Any:
            return _StubRuntime()

    settings = new_settings(kafka, db)
    async with engine_bench(settings, engine_cls=StubEngine) as (b, _):
        await b.deploy(TEN, "Ten")
        await sumi_run(b, 5, 5, "engine only")
        return [await sumi_run(b, N1, 1, "engine only"), await sumi_run(b, N100, 100, "engine only")]


# ---- DBOS -------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def dbos_ten(db: str) -> AsyncIterator[Callable[[], Awaitable[Any]]]:
    """DBOS launched with the 10-step workflow; yields what starts one (its handle's result
    is the step latencies)."""
    from dbos import DBOS

    DBOS(
        config={
            "name": "sumi-bench",
            "system_database_url": db,
            "dbos_system_schema": f"dbos_{uuid.uuid4().hex[:8]}",
            "log_level": "WARNING",
            "sys_db_pool_size": 40,
        }
    )

    @DBOS.step()
    async def effect(i: int) -> dict[str, int]:
        return {"i": i}

    @DBOS.workflow()
    async def ten() -> list[float]:
        lat = []
        for i in range(STEPS):
            t0 = time.perf_counter()
            await effect(i)
            lat.append((time.perf_counter() - t0) * 1000)
        return lat

    DBOS.launch()
    try:
        yield lambda: DBOS.start_workflow_async(ten)
    finally:
        DBOS.destroy()


async def dbos_closed(start: Callable[[], Awaitable[Any]]) -> list[dict[str, Any]]:
    async def measure(n: int, concurrency: int) -> dict[str, Any]:
        lat: list[float] = []
        starts: list[float] = []

        async def one(i: int) -> None:
            handle = await start()
            starts.append(time.perf_counter())
            lat.extend((await handle.get_result())[1:])

        elapsed = await pool(n, concurrency, one)
        span = (max(starts) - min(starts)) if len(starts) > 1 else elapsed
        return figures(f"dbos c={concurrency}", n, elapsed, max(span, 1e-3) * n / max(n - 1, 1), lat)

    await measure(5, 5)
    return [await measure(N1, 1), await measure(N100, 100)]


async def dbos_bench(db: str) -> list[dict[str, Any]]:
    async with dbos_ten(db) as start:
        return await dbos_closed(start)


async def bench(kafka: str, db: str) -> None:
    ours = await sumi_bench(kafka, db)
    await engine_ceiling(kafka, db)
    theirs = await dbos_bench(db)
    for a, b in zip(ours, theirs, strict=True):
        print(
            json.dumps(
                {
                    "ratio": f"{a['system']} / {b['system']}",
                    "instances_started": round(a["instances_started_per_s"] / b["instances_started_per_s"], 2),
                    "steps_per_s": round(a["steps_per_s"] / b["steps_per_s"], 2),
                    "step_p50": round(a["step_p50_ms"] / b["step_p50_ms"], 2),
                }
            ),
            flush=True,
        )


def main() -> None:
    with parts() as (kafka, db):
        asyncio.run(bench(kafka, db))


if __name__ == "__main__":
    main()
