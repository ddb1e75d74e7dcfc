"""How the engines' restart time, memory and the database grow with what they hold.

Run: python -m tests.bench.bench_scale

For each size, a whole Host of its own (every service its own process, as `sumi up` runs them),
on one broker and one PostgreSQL for the run; everything goes through the front door (HTTP):
- settled: N messages sent (batches of 100) to a queue with a Consumer (a JS handler that
  returns: implicit ack) and acknowledged; then the queue engine's RSS (VmRSS of its process,
  and of its runtime processes beside it), PostgreSQL's size, and its restart time: SIGKILL, a
  new process, one message sent, until that message's ACK is readable (committed);
- backlog: N more messages to a queue with no Consumer (they stay ready); then the same
  restart time (the one message goes to the queue with the Consumer), and RSS after it;
- workflow: M instances (one `step.do` each) created over HTTP and completed; the workflow
  engine's RSS, PostgreSQL's size, and its restart time: SIGKILL, a new process, one instance
  created, until its completion is readable.
Then the ratios of restart time and RSS at the biggest size over the smallest, beside the
target: flat within 2x from 100k to 1M messages; RSS under 300 MB with a 1M-message backlog.

SUMI_LOG_LEVEL=INFO passes the engines' own log (snapshots written, restores) to stderr.
Sizes: BENCH_SCALE_MESSAGES (default "100000,1000000"), BENCH_SCALE_INSTANCES (default
"10000,100000"); BENCH_SCALE_BIG=1 adds 10,000,000 messages. BENCH_SCALE_SENDERS (8) POSTs at a
time. Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from itertools import zip_longest
from typing import Any

import psutil
from aiokafka import TopicPartition

from sumi.core import records as r
from sumi.wire import codec
from tests.bench._parts import parts
from tests.bench._tail import Tail
from tests.bench.bench_queue import WORKER, AckWatcher, send, wait_acked
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, SpaceFixture, new_settings, running_host
from tests.httpkit import WORKFLOW, Users


def sizes(name: str, default: str) -> list[int]:
    return [int(s) for s in os.environ.get(name, default).replace("_", "").split(",") if s.strip()]


MESSAGES = sizes("BENCH_SCALE_MESSAGES", "100000,1000000")
if os.environ.get("BENCH_SCALE_BIG") == "1":
    MESSAGES.append(10_000_000)
INSTANCES = sizes("BENCH_SCALE_INSTANCES", "10000,100000")
SENDERS = int(os.environ.get("BENCH_SCALE_SENDERS", "8"))
BATCH = 100
ONE = """
export class One {
  async run(event, step) {
    return await step.do('s', async () => ({ ok: true }));
  }
}
"""
_STATUS_FP = codec.encode(r.InstanceStatusChanged("w", "i", "queued", 0))[2:10]


def rss_mb(pid: int) -> float:
    """VmRSS of one process, MB (from /proc/<pid>/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def children_rss_mb(pid: int) -> float:
    """VmRSS of a service's runtime processes (its children), MB."""
    total = 0.0
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error, OSError):
                total += rss_mb(p.pid)
    return total


async def pg_sizes(host: Host) -> tuple[float, float]:
    """pg_database_size, and this Host's schema's tables with their indexes and TOAST, MB."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(host.settings.database_url, autocommit=True) as conn:
        db = await (await conn.execute("SELECT pg_database_size(current_database())")).fetchone()
        schema = await (
            await conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
                (host.settings.db_schema,),
            )
        ).fetchone()
    assert db is not None and schema is not None
    return db[0] / 2**20, float(schema[0]) / 2**20


def restart(host: Host, service: str) -> float:
    """SIGKILL the service and start a new process of it at once (not after the supervisor's
    backoff); the perf_counter at the new start."""
    sup = host.supervisor
    sup.held.add(service)  # the supervisor's watcher leaves it to us
    sup.kill(service, signal.SIGKILL)
    started = time.perf_counter()
    sup.start_service(service)
    sup.release(service)
    return started


def pid(host: Host, service: str) -> int:
    return host.supervisor.procs[service].pid


async def until_stats(api: Api, queue: str, key: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while (await api.stats(queue))[key] < n:
        assert time.monotonic() < deadline, f"{queue}: {key} never reached {n}"
        await asyncio.sleep(1)


async def send_many(api: Api, users: Users, queue: str, n: int) -> float:
    """n messages in POSTs of BATCH, SENDERS at a time; messages/s accepted."""
    todo = iter(range(0, n, BATCH))
    sink: dict[str, float] = {}

    async def sender() -> None:
        for start in todo:
            await send(api, users, queue, min(BATCH, n - start), sink)
            sink.clear()

    t0 = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(SENDERS)))
    return n / (time.perf_counter() - t0)


async def queue_restart(host: Host, api: Api, users: Users, queue: str) -> float:
    """Seconds from the queue engine's new process to the ACK of one message sent after it."""
    watcher = AckWatcher(host.settings)
    await watcher.start()
    try:
        started = restart(host, "queue")
        sent: dict[str, float] = {}
        await send(api, users, queue, 1, sent)
        await wait_acked(watcher, sent, timeout=300)
        return watcher.acked[next(iter(sent))] - started
    finally:
        await watcher.stop()


class Completions(Tail):
    """Follows the instance log (read_committed): how many instances completed, and when each did."""

    topics = ("workflow",)

    def __init__(self, host: Host) -> None:
        super().__init__(host.settings)
        self.done: dict[str, float] = {}

    def take(self, batch: dict[TopicPartition, list[Any]]) -> None:
        now = time.perf_counter()
        for msgs in batch.values():
            for m in msgs:
                if m.value[2:10] == _STATUS_FP:
                    rec = codec.decode(m.value)
                    if isinstance(rec, r.InstanceStatusChanged) and rec.status in ("complete", "errored"):
                        self.done.setdefault(rec.instanceId, now)

    async def wait(self, ids: set[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ids <= self.done.keys():
            assert time.monotonic() < deadline, f"{len(ids - self.done.keys())} instances never completed"
            await asyncio.sleep(0.05)


async def editor_api(host: Host, client: Any) -> tuple[Api, SpaceFixture]:
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    name = "bench-" + uuid.uuid4().hex[:8]
    assert (await client.post("/v2/spaces", json={"name": name}, headers=admin)).status_code == 201
    resp = await client.post(
        "/v2/tokens",
        headers=admin,
        json={"principal": f"ed-{name}", "grants": [{"space": name, "role": "editor"}], "admin": False},
    )
    space = SpaceFixture(name, resp.json()["token"], "")
    return Api(client, space), space


async def queue_part(host: Host, users: Users, n: int) -> dict[str, Any]:
    api, _ = await editor_api(host, users.all[0])
    worker = await api.worker(WORKER)
    settled, backlog = await api.queue(), await api.queue()
    await api.consumer(settled, worker, maxBatchSize=100, maxConcurrency=10, maxBatchTimeoutSeconds=0)
    out: dict[str, Any] = {"messages": n}
    t0 = time.perf_counter()
    out["send_rate"] = round(await send_many(api, users, settled, n))
    await until_stats(api, settled, "acknowledged", n, timeout=max(600, n / 50))
    out["settle_s"] = round(time.perf_counter() - t0, 1)
    await asyncio.sleep(5)  # past the last commits
    out["rss_settled_mb"] = round(rss_mb(pid(host, "queue")), 1)
    out["runtime_rss_mb"] = round(children_rss_mb(pid(host, "queue")), 1)
    out["pg_db_mb"], out["pg_schema_mb"] = (round(x, 1) for x in await pg_sizes(host))
    out["restart_s"] = round(await queue_restart(host, api, users, settled), 2)
    await asyncio.sleep(5)
    out["rss_restarted_mb"] = round(rss_mb(pid(host, "queue")), 1)
    print(json.dumps({"queue settled": out}), flush=True)
    # A backlog: N messages on a queue no Consumer reads, so they stay ready.
    t0 = time.perf_counter()
    out["backlog_send_rate"] = round(await send_many(api, users, backlog, n))
    await until_stats(api, backlog, "ready", n, timeout=max(600, n / 50))
    await asyncio.sleep(5)
    out["rss_backlog_mb"] = round(rss_mb(pid(host, "queue")), 1)
    out["backlog_restart_s"] = round(await queue_restart(host, api, users, settled), 2)
    await asyncio.sleep(5)
    out["rss_backlog_restarted_mb"] = round(rss_mb(pid(host, "queue")), 1)
    out["backlog_pg_db_mb"], out["backlog_pg_schema_mb"] = (round(x, 1) for x in await pg_sizes(host))
    print(json.dumps({"queue with backlog": out}), flush=True)
    return out


async def workflow_part(host: Host, users: Users, m: int) -> dict[str, Any]:
    api, space = await editor_api(host, users.all[0])
    worker = await api.worker(source=ONE, handlers=())
    uid = await api.create(
        f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": worker}, "className": "One"}
    )
    tag = uuid.uuid4().hex[:6]
    completions = Completions(host)
    await completions.start()
    out: dict[str, Any] = {"instances": m}
    try:
        todo = iter(range(m))

        async def creator() -> None:
            for i in todo:
                async with users.lend() as client:
                    resp = await Flows(Api(client, space), uid).create({"id": f"{tag}-{i}"})
                assert resp.status_code == 201, resp.text

        t0 = time.perf_counter()
        await asyncio.gather(*(creator() for _ in range(SENDERS * 4)))
        out["create_rate"] = round(m / (time.perf_counter() - t0))
        await completions.wait({f"{tag}-{i}" for i in range(m)}, timeout=max(600, m / 20))
        out["complete_s"] = round(time.perf_counter() - t0, 1)
        await asyncio.sleep(5)
        out["rss_mb"] = round(rss_mb(pid(host, "workflow")), 1)
        out["runtime_rss_mb"] = round(children_rss_mb(pid(host, "workflow")), 1)
        out["pg_db_mb"], out["pg_schema_mb"] = (round(x, 1) for x in await pg_sizes(host))
        started = restart(host, "workflow")
        probe = f"{tag}-probe"
        # While the new engine restores, a create may answer 503 backend_unavailable; a user
        # retries it with the same Idempotency-Key (host-api.md), and so does the probe.
        while (resp := await Flows(api, uid).create({"id": probe}, key=probe)).status_code == 503:
            out["probe_503s"] = out.get("probe_503s", 0) + 1
        assert resp.status_code == 201, resp.text
        await completions.wait({probe}, timeout=300)
        out["restart_s"] = round(completions.done[probe] - started, 2)
        await asyncio.sleep(5)
        out["rss_restarted_mb"] = round(rss_mb(pid(host, "workflow")), 1)
    finally:
        await completions.stop()
    print(json.dumps({"workflow": out}), flush=True)
    return out


async def one_host(host: Host, n: int | None, m: int | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    async with Users(host.url, 64, timeout=120) as users:
        q = await queue_part(host, users, n) if n else None
        w = await workflow_part(host, users, m) if m else None
    return q, w


def ratio(rows: list[dict[str, Any]], key: str) -> str:
    if len(rows) < 2 or not rows[0][key]:
        return "-"
    return f"{rows[-1][key] / rows[0][key]:.2f}x"


def report(queues: list[dict[str, Any]], flows: list[dict[str, Any]]) -> None:
    print()
    print(f"{os.cpu_count()} cores; PG db MB is the whole database (each size's Host adds a schema to it)")
    head = (
        f"{'messages':>10} {'send/s':>7} {'restart s':>9} {'RSS MB':>7} {'runtime MB':>10} {'PG db MB':>9}"
        f" {'schema MB':>9} | backlog: {'restart s':>9} {'RSS MB':>7} {'after restart':>13} {'PG db MB':>9}"
    )
    print(head)
    for q in queues:
        print(
            f"{q['messages']:>10} {q['send_rate']:>7} {q['restart_s']:>9} {q['rss_settled_mb']:>7}"
            f" {q['runtime_rss_mb']:>10} {q['pg_db_mb']:>9} {q['pg_schema_mb']:>9} |"
            f"          {q['backlog_restart_s']:>9} {q['rss_backlog_mb']:>7} {q['rss_backlog_restarted_mb']:>13}"
            f" {q['backlog_pg_db_mb']:>9}"
        )
    print(
        f"{'instances':>10} {'create/s':>8} {'restart s':>9} {'RSS MB':>7} {'runtime MB':>10}"
        f" {'PG db MB':>9} {'schema MB':>9}"
    )
    for w in flows:
        print(
            f"{w['instances']:>10} {w['create_rate']:>8} {w['restart_s']:>9} {w['rss_mb']:>7}"
            f" {w['runtime_rss_mb']:>10} {w['pg_db_mb']:>9} {w['pg_schema_mb']:>9}"
        )
    ratios = {
        "queue restart (settled)": ratio(queues, "restart_s"),
        "queue restart (backlog)": ratio(queues, "backlog_restart_s"),
        "queue RSS (settled)": ratio(queues, "rss_settled_mb"),
        "queue RSS (backlog, after restart)": ratio(queues, "rss_backlog_restarted_mb"),
        "workflow restart": ratio(flows, "restart_s"),
        "workflow RSS": ratio(flows, "rss_mb"),
    }
    span = f"{queues[0]['messages']} -> {queues[-1]['messages']} messages" if queues else ""
    wspan = f"{flows[0]['instances']} -> {flows[-1]['instances']} instances" if flows else ""
    print(json.dumps({"ratios, biggest / smallest": ratios, "queue sizes": span, "workflow sizes": wspan}))
    if queues:
        big = queues[-1]
        flat = all(
            len(queues) > 1 and queues[0][k] and big[k] / queues[0][k] <= 2
            for k in ("restart_s", "backlog_restart_s", "rss_settled_mb", "rss_backlog_restarted_mb")
        )
        backlog_rss = max(big["rss_backlog_mb"], big["rss_backlog_restarted_mb"])
        print(
            json.dumps(
                {
                    "target: flat within 2x (the issue: from 100k to 1M)": flat,
                    f"target: RSS < 300 MB with a {big['messages']}-message backlog": backlog_rss < 300,
                    "measured at": span,
                }
            )
        )


def main() -> None:
    queues: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    with parts() as (kafka, db):
        for n, m in zip_longest(MESSAGES, INSTANCES):
            # SUMI_LOG_LEVEL=INFO shows the engines' snapshots and restores on stderr
            level = os.environ.get("SUMI_LOG_LEVEL", "WARNING")
            with running_host(new_settings(kafka, db, log_level=level)) as host:
                q, w = asyncio.run(one_host(host, n, m))
            queues += [q] if q else []
            flows += [w] if w else []
    report(queues, flows)


if __name__ == "__main__":
    main()
