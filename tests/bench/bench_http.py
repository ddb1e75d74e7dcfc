"""The workflow benchmark through the front door, beside DBOS Transact and the floors.

Run: python -m tests.bench.bench_http

A whole Host (every service its own process, as `sumi up` runs them) on one broker
and one PostgreSQL; the client creates 10-step instances with `POST .../instances`
over HTTP and reads each one back with `GET` once the instance log says it ended,
so every figure includes the gateway, the decision's way back and the read model:
- instances/s, committed steps/s, `POST` latency, create -> complete (as a `GET`
  sees it) and one `step.do` (from the call to its committed result, measured
  inside the workflow), at concurrency 1 and 100;
- with BENCH_REPLICAS=2: the c=100 run again with a second workflow engine sharing the partitions;
- CPU seconds per process during the c=100 run;
- DBOS Transact with the same workflow, same PostgreSQL, same session;
- an open loop (BENCH_MODE=open|closed|all, default all): creates sent at fixed offered
  rates (BENCH_RATES per s, BENCH_OPEN_S seconds each) whatever the answers do, for sumi
  and for DBOS, with CPU milliseconds per committed step of each process at each rate;
- the floors measured in the same run: a Kafka transaction commit (one record),
  the time from that commit until a read_committed reader has the record, an acks=all
  produce, a PostgreSQL commit, and a transaction as an engine commits one (1 and 100
  records with the consumer offsets) with the broker's CPU per transaction.
BENCH_SETTINGS (JSON) sets any of the Host's settings.
Ends with a table to paste. Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import psutil
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sumi.core import records as r
from sumi.wire import codec, kafka
from tests.bench._open import open_loop
from tests.bench._parts import parts
from tests.bench._profile import cpu_seconds, processes, profiled
from tests.bench._table import table
from tests.bench._tail import Tail
from tests.bench.bench_workflow import STEPS, TEN, dbos_closed, dbos_ten, pct, pool
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, SpaceFixture, new_settings, running_host, serve_replica, stable_members
from tests.httpkit import WORKFLOW, Users

N1 = int(os.environ.get("BENCH_WF_N1", "30"))
N100 = int(os.environ.get("BENCH_WF_N100", "600"))
REPLICAS = int(os.environ.get("BENCH_REPLICAS", "1"))  # 2: the c=100 run again with a second workflow engine
MODE = os.environ.get("BENCH_MODE", "all")  # open | closed | all
RATES = [float(x) for x in os.environ.get("BENCH_RATES", "10,25,50").split(",")]
OPEN_S = float(os.environ.get("BENCH_OPEN_S", "20"))
IDLE_S = float(os.environ.get("BENCH_IDLE_S", "5"))
SETTINGS = json.loads(os.environ.get("BENCH_SETTINGS", "{}"))  # any other Settings field
SUMI = "sumi/http"  # the Host's name in the figures
_STATUS_FP = codec.encode(r.InstanceStatusChanged("w", "i", "queued", 0))[2:10]
_DECIDED_FP = codec.encode(r.CommandDecided("c", "s", "p", "k", True, 201, 0))[2:10]
_SUBMITTED_FP = codec.encode(r.CommandSubmitted("c", "k", "s", "p", False, "{}", 0))[2:10]


class Ends(Tail):
    """Follows the instance log (read_committed) and resolves a future when an instance ends;
    notes, per instance, when its create command was appended, when the engine sent its
    decision, and when that decision became readable (committed)."""

    topics = ("workflow", "workflow.commands")

    def __init__(self, host: Host) -> None:
        super().__init__(host.settings)
        self.waiting: dict[str, asyncio.Future[None]] = {}
        self.appended: dict[str, float] = {}
        self.decided: dict[str, tuple[float, float]] = {}  # instance -> (sent, readable)
        self.instance_of: dict[str, str] = {}  # command ID -> instance ID

    def ended(self, iid: str) -> asyncio.Future[None]:
        return self.waiting.setdefault(iid, asyncio.get_running_loop().create_future())

    def take(self, batch: dict[TopicPartition, list[Any]]) -> None:
        now = time.time()
        for msgs in batch.values():
            for m in msgs:
                if m.value[2:10] == _SUBMITTED_FP and m.key:
                    rec = codec.decode(m.value)
                    iid = m.key.decode().rsplit("/", 1)[-1]
                    self.appended[iid] = m.timestamp / 1000
                    self.instance_of[rec.commandId] = iid
                    continue
                if m.value[2:10] == _DECIDED_FP:
                    rec = codec.decode(m.value)
                    if rec.commandId in self.instance_of:
                        self.decided[self.instance_of[rec.commandId]] = (m.timestamp / 1000, now)
                    continue
                if m.value[2:10] != _STATUS_FP:
                    continue
                rec = codec.decode(m.value)
                if isinstance(rec, r.InstanceStatusChanged) and rec.status in ("complete", "errored"):
                    self.ended(rec.instanceId).set_result(None) if not self.ended(rec.instanceId).done() else None


async def sumi_run(
    people: Users, flows_of: Callable[[httpx.AsyncClient], Flows], ends: Ends, n: int, concurrency: int
) -> dict[str, Any]:
    """n instances, `concurrency` users at a time, each with an HTTP client of its own."""
    tag = uuid.uuid4().hex[:6]
    posts: list[float] = []
    phases: dict[str, list[float]] = {
        "post->appended": [],
        "appended->decided": [],
        "decided->readable": [],
        "readable->answered": [],
    }
    to_complete: list[float] = []
    lat: list[float] = []
    starts: list[float] = []
    gets: list[int] = []

    async def one(i: int) -> None:
        async with people.lend() as client:
            await instance(i, flows_of(client))

    async def instance(i: int, flows: Flows) -> None:
        iid = f"{tag}-{i}"
        ended = ends.ended(iid)
        t0, w0 = time.perf_counter(), time.time()
        resp = await flows.create({"id": iid})
        t1, w1 = time.perf_counter(), time.time()
        assert resp.status_code == 201, resp.text
        posts.append((t1 - t0) * 1000)
        starts.append(t1)
        await asyncio.wait_for(ended, 300)
        pause = 0.001
        while True:  # what a user sees: the read model says complete
            got = await flows.get(iid)
            gets.append(1)
            body = got.json()
            if body["status"] == "complete":
                break
            assert body["status"] not in ("errored", "terminated"), body
            # Asked again soon: the log says it ended, so the read model is a few ms behind at
            # most, and the figure is when a GET first sees it, not a poll interval (10 ms here
            # before added up to 10 ms to create -> complete). Doubling, so that a hundred users
            # waiting on a projection under load do not become the load (1 ms each had a hundred
            # users send several GETs per instance).
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.016)
        to_complete.append((time.perf_counter() - t0) * 1000)
        if iid in ends.appended and iid in ends.decided:
            appended, (sent, readable) = ends.appended[iid], ends.decided[iid]
            for phase, ms in zip(phases, (appended - w0, sent - appended, readable - sent, w1 - readable), strict=True):
                phases[phase].append(ms * 1000)
        lat.extend(body["output"]["lat"][1:])  # the first one also waits for the context start

    elapsed = await pool(n, concurrency, one)
    span = (max(starts) - min(starts)) if len(starts) > 1 else elapsed
    out = {
        "system": f"{SUMI} c={concurrency}",
        "instances": n,
        "creates_per_s": round(n / max(span * n / max(n - 1, 1), 1e-3), 1),
        "steps_per_s": round(n * STEPS / elapsed, 1),
        "step_p50_ms": round(pct(lat, 50), 2),
        "step_p99_ms": round(pct(lat, 99), 2),
        "post_p50_ms": round(pct(posts, 50), 2),
        "post_p99_ms": round(pct(posts, 99), 2),
        "create_to_complete_p50_ms": round(pct(to_complete, 50), 2),
        "create_to_complete_p99_ms": round(pct(to_complete, 99), 2),
        "gets_per_instance": round(len(gets) / n, 2),
        "create_phases_p50_ms": {phase: round(pct(v, 50), 1) for phase, v in phases.items()},
    }
    print(json.dumps(out), flush=True)
    return out


async def floors(host: Host) -> dict[str, float]:
    """What no design on this machine beats: p50 of an acks=all produce, of a one-record Kafka
    transaction (back to back, as an engine commits: on one producer, with aiokafka's own retry of
    a transaction begun while the last one's markers are written and with a shorter one, and on two
    producers taking turns, as sumi's outbox does), and of a PostgreSQL commit of one row."""
    import psycopg
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.producer import sender

    s = host.settings
    topic = f"{s.topic_prefix}.bench-floor"
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, s.partitions, s.replication)])
    await admin.close()
    plain = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, acks="all", enable_idempotence=True)
    await plain.start()
    produce: list[float] = []
    try:
        for _ in range(200):
            t0 = time.perf_counter()
            await plain.send_and_wait(topic, b"x", key=b"bench")
            produce.append((time.perf_counter() - t0) * 1000)
    finally:
        await plain.stop()

    async def back_to_back(backoff: float, turns: int) -> list[float]:
        sender.BACKOFF_OVERRIDE = backoff
        tid = f"bench-{uuid.uuid4().hex[:6]}"
        txns = [
            AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, transactional_id=f"{tid}-{t}") for t in range(turns)
        ]
        took: list[float] = []
        for txn in txns:
            await txn.start()
        try:
            for i in range(200):
                txn = txns[i % turns]
                t0 = time.perf_counter()
                async with txn.transaction():
                    await txn.send(topic, b"x", key=b"bench")
                took.append((time.perf_counter() - t0) * 1000)
        finally:
            for txn in txns:
                await txn.stop()
            sender.BACKOFF_OVERRIDE = default
        return took

    default, ours = sender.BACKOFF_OVERRIDE, kafka.TXN_RETRY_S

    async def readable_after_commit() -> list[float]:
        """From a one-record transaction's commit (EndTxn answered) until a read_committed reader
        waiting in its fetch, as the projections do, has the record: the commit markers' write
        and the fetch's answer, which every answer through the read side waits for."""
        sender.BACKOFF_OVERRIDE = ours
        txn = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, transactional_id=f"bench-{uuid.uuid4().hex[:6]}")
        reader = AIOKafkaConsumer(
            bootstrap_servers=s.kafka_bootstrap, isolation_level="read_committed", enable_auto_commit=False
        )
        await txn.start()
        await reader.start()
        tp = TopicPartition(topic, 0)
        reader.assign([tp])
        await reader.seek_to_end(tp)
        took: list[float] = []
        try:
            for _ in range(200):
                await asyncio.sleep(0.002)
                async with txn.transaction():
                    await txn.send(topic, b"x", partition=0)
                t0 = time.perf_counter()
                while not (await reader.getmany(tp, timeout_ms=1000)).get(tp):
                    pass
                took.append((time.perf_counter() - t0) * 1000)
        finally:
            await txn.stop()
            await reader.stop()
            sender.BACKOFF_OVERRIDE = default
        return took

    alone, shorter, turns = await back_to_back(default, 1), await back_to_back(ours, 1), await back_to_back(ours, 2)
    readable = await readable_after_commit()
    engine_like = {**await engine_txn(host, topic, 1), **await engine_txn(host, topic, 100)}
    pg = []
    async with await psycopg.AsyncConnection.connect(s.database_url) as conn:
        await conn.execute("CREATE TEMP TABLE bench_floor (k int)")
        for i in range(200):
            t0 = time.perf_counter()
            async with conn.transaction():
                await conn.execute("INSERT INTO bench_floor VALUES (%s)", (i,))
            pg.append((time.perf_counter() - t0) * 1000)
    out = {
        "kafka_produce_p50_ms": round(pct(produce, 50), 2),
        f"kafka_txn_commit_p50_ms (one producer, aiokafka {default * 1000:g} ms retry)": round(pct(alone, 50), 2),
        f"kafka_txn_commit_p50_ms (one producer, {ours * 1000:g} ms retry)": round(pct(shorter, 50), 2),
        "kafka_txn_commit_p50_ms (two taking turns, as sumi's outbox)": round(pct(turns, 50), 2),
        "kafka_commit_to_readable_p50_ms (read_committed fetch)": round(pct(readable, 50), 2),
        "postgres_commit_p50_ms": round(pct(pg, 50), 2),
        **engine_like,
    }
    print(json.dumps({"floors": out}), flush=True)
    return out


async def engine_txn(host: Host, topic: str, records: int, n: int = 100) -> dict[str, float]:
    """A transaction as an engine commits one, back to back: `records` records and the consumer
    offsets they answer; its p50 wall time and the broker's CPU, per transaction and per record."""
    from aiokafka.producer import sender

    s, default = host.settings, sender.BACKOFF_OVERRIDE
    sender.BACKOFF_OVERRIDE = kafka.TXN_RETRY_S
    txn = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, transactional_id=f"bench-{uuid.uuid4().hex[:6]}")
    await txn.start()
    tp, group, took = TopicPartition(topic, 0), f"{s.topic_prefix}-bench-floor", []
    try:
        with cpu_seconds({"kafka": processes(host)["kafka"]}, f"{records}-record txn + offsets x{n}") as used:
            for i in range(n):
                t0 = time.perf_counter()
                async with txn.transaction():
                    for _ in range(records):
                        await txn.send(topic, b"x" * 100, partition=0)  # enqueued; the commit flushes
                    await txn.send_offsets_to_transaction({tp: i + 1}, group)
                took.append((time.perf_counter() - t0) * 1000)
    finally:
        await txn.stop()
        sender.BACKOFF_OVERRIDE = default
    wall, broker = pct(took, 50), used["kafka"] * 1000 / n
    name = f"kafka_txn_{records}_records+offsets"
    out = {f"{name}_p50_ms": round(wall, 2), f"{name}_broker_cpu_ms": round(broker, 2)}
    if records > 1:
        out |= {
            f"{name}_p50_ms_per_record": round(wall / records, 3),
            f"{name}_broker_cpu_ms_per_record": round(broker / records, 3),
        }
    return out


def cpu_ms_per(used: dict[str, float], units: float) -> dict[str, float]:
    """CPU ms per unit (a committed step, a second) of each part, and the total of all but the bench client."""
    out = {part: round(seconds * 1000 / max(units, 1e-9), 3) for part, seconds in used.items()}
    out["total"] = round(sum(ms for part, ms in out.items() if part != "bench client"), 3)
    return out


async def open_runs(
    name: str, create: Callable[[str], Awaitable[Awaitable[Any]]], parts: dict[str, list[psutil.Process]]
) -> list[dict[str, Any]]:
    """The open loop at each offered rate, with the CPU each part used per committed step (the
    window runs until every instance sent has completed, so its steps are all committed in it),
    and what each uses per second at rest: the share of a step's figure that is not the step's."""
    tag, out = uuid.uuid4().hex[:6], []
    with cpu_seconds(parts, f"{name} at rest") as idle:
        await asyncio.sleep(IDLE_S)
    idle_ms_per_s = cpu_ms_per(idle, IDLE_S)
    for rate in RATES:
        with cpu_seconds(parts, f"{name} {rate:g}/s") as used, profiled(parts, f"{name} {rate:g}/s"):
            run = await open_loop(name, rate, OPEN_S, lambda i, rate=rate: create(f"{tag}-{rate:g}-{i}"))
        run["cpu_ms_per_step"] = cpu_ms_per(used, run["completed"] * STEPS)
        run["idle_cpu_ms_per_s"] = idle_ms_per_s
        print(json.dumps({f"{name} {rate:g}/s cpu ms per committed step": run["cpu_ms_per_step"]}), flush=True)
        out.append(run)
    return out


async def projection_lag(host: Host, ends: Ends) -> list[int]:
    """How far the workflow read model trails the instance log: a queue everyone's answer waits in."""
    import psycopg

    s, samples = host.settings, []
    tps = [TopicPartition(s.topic("workflow"), p) for p in range(s.partitions)]
    async with await psycopg.AsyncConnection.connect(s.database_url, autocommit=True) as conn:
        try:
            while True:
                await asyncio.sleep(2)
                end = await ends.consumer.end_offsets(tps)
                rows = await (
                    await conn.execute(
                        f"SELECT partition, next_offset FROM {s.db_schema}.projection_offsets "
                        "WHERE projection = 'workflow' AND topic = %s",
                        (s.topic("workflow"),),
                    )
                ).fetchall()
                applied = dict(rows)
                samples.append(sum(end[tp] - applied.get(tp.partition, 0) for tp in tps))
        except asyncio.CancelledError:
            return samples


async def lag_samples(task: asyncio.Task[list[int]]) -> list[int]:
    try:
        return await task
    except asyncio.CancelledError:
        return []


async def sumi_bench(host: Host) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The closed runs (c=1, c=100) and the open ones, as BENCH_MODE asks."""
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    async with Users(host.url, 100) as people:
        client = people.all[0]
        name = "bench-" + uuid.uuid4().hex[:8]
        assert (await client.post("/v2/spaces", json={"name": name}, headers=admin)).status_code == 201
        resp = await client.post(
            "/v2/tokens",
            headers=admin,
            json={"principal": f"ed-{name}", "grants": [{"space": name, "role": "editor"}], "admin": False},
        )
        space = SpaceFixture(name, resp.json()["token"], "")
        api = Api(client, space)
        worker = await api.worker(source=TEN, handlers=())
        flows = Flows(
            api,
            await api.create(
                f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": worker}, "className": "Ten"}
            ),
        )

        def flows_of(c: httpx.AsyncClient) -> Flows:
            return Flows(Api(c, space), flows.uid)

        async def create(iid: str) -> asyncio.Future[None]:
            ended = ends.ended(iid)
            async with people.lend() as client:
                resp = await flows_of(client).create({"id": iid})
            if resp.status_code != 201:
                raise RuntimeError(f"{resp.status_code} {resp.text[:200]}")
            return ended

        ends = Ends(host)
        await ends.start()
        try:
            await sumi_run(people, flows_of, ends, 5, 5)  # warm-up: runtime started, JIT, connections
            parts = processes(host)
            opened = await open_runs(f"{SUMI} open", create, parts) if MODE in ("open", "all") else []
            if MODE not in ("closed", "all"):
                return [], opened
            with profiled(parts, "c=1"):
                one = await sumi_run(people, flows_of, ends, N1, 1)
            lag = asyncio.create_task(projection_lag(host, ends))
            with cpu_seconds(parts, f"{SUMI} c=100"), profiled(parts, "c=100"):
                hundred = await sumi_run(people, flows_of, ends, N100, 100)
            lag.cancel()
            print(json.dumps({"workflow projection lag (records), every 2 s": await lag_samples(lag)}), flush=True)
            if REPLICAS > 1:
                await with_replicas(host, people, flows_of, ends, hundred)
            return [one, hundred], opened
        finally:
            await ends.stop()


async def with_replicas(
    host: Host, people: Users, flows_of: Callable[[httpx.AsyncClient], Flows], ends: Ends, alone: dict[str, Any]
) -> None:
    """The c=100 run again with REPLICAS - 1 more workflow engines sharing the partitions."""
    procs = [serve_replica(host, "workflow", f"bench-{i}") for i in range(1, REPLICAS)]
    try:
        group = f"{host.settings.topic_prefix}-workflow-engine"
        await stable_members(host.settings.kafka_bootstrap, [group], REPLICAS, 120)
        await sumi_run(people, flows_of, ends, 20, 20)  # warm-up: the new replica's runtimes
        scaled = await sumi_run(people, flows_of, ends, N100, 100)
        ratio = round(scaled["steps_per_s"] / alone["steps_per_s"], 2)
        print(json.dumps({f"c=100 steps/s, {REPLICAS} workflow engines / one": ratio}), flush=True)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


async def dbos_bench(host: Host) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """DBOS closed and open, in one launch; its CPU is this process's (DBOS runs in it) and PostgreSQL's."""
    async with dbos_ten(host.settings.database_url) as start:

        async def create(iid: str) -> Awaitable[Any]:
            return (await start()).get_result()

        closed = await dbos_closed(start) if MODE in ("closed", "all") else []
        for _ in range(5):  # warm-up, as sumi's
            await (await create(""))
        parts = {"dbos (in the bench process)": [psutil.Process()], "postgres": processes(host)["postgres"]}
        opened = await open_runs("dbos open", create, parts) if MODE in ("open", "all") else []
        return closed, opened


async def bench(host: Host, dbos: bool = True) -> None:
    bottom = await floors(host)
    ours, ours_open = await sumi_bench(host)
    if not dbos:
        print(table(ours, ours_open, bottom), flush=True)
        return
    theirs, theirs_open = await dbos_bench(host)
    for a, b in zip(ours, theirs, strict=True):
        print(
            json.dumps(
                {
                    "ratio": f"{a['system']} / {b['system']}",
                    "steps_per_s": round(a["steps_per_s"] / b["steps_per_s"], 2),
                    "step_p50": round(a["step_p50_ms"] / b["step_p50_ms"], 2),
                }
            ),
            flush=True,
        )
    if ours:
        c1, c100 = ours
        targets = {
            "c=100 steps/s >= 1000": c100["steps_per_s"] >= 1000,
            "c=100 POST p50 <= 50 ms": c100["post_p50_ms"] <= 50,
            "c=1 step p50 <= 5 ms": c1["step_p50_ms"] <= 5,
            "c=1 POST p50 <= 10 ms": c1["post_p50_ms"] <= 10,
            "c=1 create->complete p50 <= 50 ms": c1["create_to_complete_p50_ms"] <= 50,
        }
        print(json.dumps({"targets met": targets}), flush=True)
    print(table(ours + theirs, ours_open + theirs_open, bottom), flush=True)


def main() -> None:
    with parts() as (kafka, db), running_host(new_settings(kafka, db, **SETTINGS)) as host:
        asyncio.run(bench(host, dbos=True))


if __name__ == "__main__":
    main()
