"""Queue throughput and latency against the broker's own limit. Run: python -m tests.bench.bench_queue

(a) raw aiokafka: produce N messages of 1 KiB and consume them back on the same
    broker (acks=all, read_committed): the physical floor of this machine.
(b) sumi end to end: HTTP send (batches of 100) -> queue engine -> JS handler
    (returns: implicit ack) -> ack committed, with maxBatchSize 100, maxConcurrency
    10. Latency per message = time its MessagesAcknowledged is readable (committed)
    minus the start of the POST that sent it.
(c) the ratio b/a, and (d) p50/p99 latency at 1,000 messages/s offered (BENCH_RATE sets another).
BENCH_PROFILE=1 prints py-spy profiles of the services during (b); (b) prints CPU seconds per process.
BENCH_SETTINGS (JSON) sets any other of the Host's settings, e.g. '{"background_nice": 0}'.
(e) with BENCH_REPLICAS=2: (b) again with a second queue engine beside the first (the engines
    share the queue log's partitions; BENCH_QUEUES queues, 6 by default then, spread the load).
Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import statistics
import time
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sumi.core import records as r
from sumi.wire import codec
from tests.bench._parts import parts
from tests.bench._profile import cpu_seconds, processes, profiled
from tests.bench._tail import Tail
from tests.conformance.kit import Api
from tests.hostkit import SpaceFixture, new_settings, running_host, serve_replica, stable_members
from tests.httpkit import Users

RAW_N = int(os.environ.get("BENCH_RAW_N", "50000"))
E2E_N = int(os.environ.get("BENCH_E2E_N", "30000"))
SENDERS = int(os.environ.get("BENCH_SENDERS", "8"))
RATE, RATE_SECONDS = int(os.environ.get("BENCH_RATE", "1000")), 10
REPLICAS = int(os.environ.get("BENCH_REPLICAS", "1"))
QUEUES = int(os.environ.get("BENCH_QUEUES", "6" if REPLICAS > 1 else "1"))
BODY = b"x" * 1024
WORKER = "export default { async queue(batch, env) {} };\n"


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))] if s else float("nan")


async def raw_kafka(bootstrap: str) -> float:
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(topic, 3, 1)])
    await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5, max_batch_size=1 << 20
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=20,
    )
    await producer.start()
    await consumer.start()
    consumer.subscribe([topic])
    await consumer.getmany(timeout_ms=1000)
    started = time.perf_counter()

    async def produce() -> None:
        futures = [await producer.send(topic, BODY, key=str(i).encode()) for i in range(RAW_N)]
        await asyncio.gather(*futures)

    async def consume() -> None:
        got = 0
        while got < RAW_N:
            for msgs in (await consumer.getmany(timeout_ms=500, max_records=10_000)).values():
                got += len(msgs)

    await asyncio.gather(produce(), consume())
    elapsed = time.perf_counter() - started
    await producer.stop()
    await consumer.stop()
    return RAW_N / elapsed


# The harness shares the machine's cores with the Host it measures: it decodes only the ACK
# records (told apart by their schema fingerprint), not every 1 KiB MessageAccepted.
_ACK_FP = codec.encode(r.MessagesAcknowledged("q", "b", (), "returned", 0))[2:10]
_ACCEPTED_FP = codec.encode(r.MessageAccepted("q", "s", "m", b"", 0, 0))[2:10]
_DELIVERED_FP = codec.encode(r.BatchDelivered("q", "c", "b", (), (), "v", 0))[2:10]
PHASES = ("post->accepted", "accepted->delivered", "delivered->acked", "acked->readable")


class AckWatcher(Tail):
    """Reads the queue log (read_committed) and notes when each message's ACK is readable."""

    topics = ("queue",)

    def __init__(self, settings: Any) -> None:
        super().__init__(settings)
        self.acked: dict[str, float] = {}
        # With `phases` on, each message's path too, by the records' timestamps (epoch ms, the
        # writer's clock: one machine): accepted, delivered, acknowledged, and when readable.
        self.phases = False
        self.stamps: dict[str, dict[str, float]] = {}

    def take(self, batch: dict[TopicPartition, list[Any]]) -> None:
        now, wall = time.perf_counter(), time.time() * 1000
        for msgs in batch.values():
            for m in msgs:
                fp = m.value[2:10]
                if fp == _ACK_FP:
                    rec = codec.decode(m.value)
                    if isinstance(rec, r.MessagesAcknowledged):
                        for mid in rec.messageIds:
                            self.acked[mid] = now
                            if self.phases:
                                self.stamps.setdefault(mid, {}).update(acked=m.timestamp, readable=wall)
                elif self.phases and fp in (_ACCEPTED_FP, _DELIVERED_FP):
                    rec = codec.decode(m.value)
                    if isinstance(rec, r.MessageAccepted):
                        self.stamps.setdefault(rec.messageId, {})["accepted"] = m.timestamp
                    elif isinstance(rec, r.BatchDelivered):
                        for mid in rec.messageIds:
                            self.stamps.setdefault(mid, {}).setdefault("delivered", m.timestamp)

    def phase_p50s(self, posted: dict[str, float]) -> dict[str, float]:
        """p50 of each step of a message's path (ms), over the messages posted (epoch ms)."""
        steps: dict[str, list[float]] = {phase: [] for phase in PHASES}
        for mid, at in posted.items():
            got = self.stamps.get(mid, {})
            marks = [at, *(got.get(k) for k in ("accepted", "delivered", "acked", "readable"))]
            if None not in marks:
                for phase, a, b in zip(PHASES, marks, marks[1:], strict=False):
                    steps[phase].append(b - a)  # type: ignore[operator]
        return {phase: round(pct(v, 50), 1) for phase, v in steps.items()}


@functools.cache
def send_body(n: int) -> bytes:
    """The JSON of a send of n messages, built once (a client's cost, not the Host's)."""
    return json.dumps({"messages": [{"body": base64.b64encode(BODY).decode()}] * n}).encode()


async def send(
    api: Api,
    users: Users,
    queue: str,
    n: int,
    sent: dict[str, float],
    posts: list[float] | None = None,
    posted: dict[str, float] | None = None,
) -> None:
    """One POST of n messages by the next free user; its time starts before the wait for one."""
    t, wall = time.perf_counter(), time.time() * 1000
    async with users.lend() as client:
        resp = await client.post(
            f"/v2/spaces/{api.space}/queues/{queue}/messages",
            headers={**api.h, "content-type": "application/json"},
            content=send_body(n),
        )
    assert resp.status_code == 202, resp.text
    if posts is not None:
        posts.append((time.perf_counter() - t) * 1000)
    for mid in resp.json()["messageIds"]:
        sent[mid] = t
        if posted is not None:
            posted[mid] = wall


async def wait_acked(watcher: AckWatcher, sent: dict[str, float], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    # Checked in sending order, each message once it is acknowledged (about the order they are):
    # going over every missing one each time cost the benchmark's client a tenth of its CPU,
    # and the client must not become the load it measures.
    order, seen = list(sent), 0
    while True:
        while seen < len(order) and order[seen] in watcher.acked:
            seen += 1
        if seen == len(order):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(m not in watcher.acked for m in order)} messages never acknowledged")
        await asyncio.sleep(0.05)


async def warmed_queues(api: Api, users: Users, watcher: AckWatcher) -> list[str]:
    """QUEUES queues with a consumer each, their runtime started and warm."""
    w = await api.worker(WORKER)
    queues = [await api.queue() for _ in range(QUEUES)]
    for q in queues:
        await api.consumer(q, w, maxBatchSize=100, maxConcurrency=10, maxBatchTimeoutSeconds=0)
    warm: dict[str, float] = {}
    for q in queues:
        await send(api, users, q, 100, warm)
    await wait_acked(watcher, warm)
    return queues


async def end_to_end(api: Api, users: Users, watcher: AckWatcher, queues: list[str]) -> tuple[float, list[float]]:
    sent: dict[str, float] = {}
    posts = E2E_N // 100
    queue_of_posts: asyncio.Queue[int] = asyncio.Queue()
    for i in range(posts):
        queue_of_posts.put_nowait(i)

    async def sender() -> None:
        while not queue_of_posts.empty():
            i = queue_of_posts.get_nowait()
            await send(api, users, queues[i % len(queues)], 100, sent)

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(SENDERS)))
    await wait_acked(watcher, sent)
    elapsed = max(watcher.acked[m] for m in sent) - started
    return len(sent) / elapsed, [(watcher.acked[m] - t) * 1000 for m, t in sent.items()]


async def offered_rate(
    api: Api, users: Users, watcher: AckWatcher
) -> tuple[list[float], list[float], dict[str, float]]:
    """Latencies send -> ack, of the POSTs alone (ms), and the p50 of each step of the path,
    with RATE messages a second offered."""
    q = await api.queue()
    w = await api.worker(WORKER)
    await api.consumer(q, w, maxBatchSize=100, maxConcurrency=10, maxBatchTimeoutSeconds=0)
    warm: dict[str, float] = {}
    await send(api, users, q, 10, warm)
    await wait_acked(watcher, warm)
    sent: dict[str, float] = {}
    posts: list[float] = []
    posted: dict[str, float] = {}
    watcher.phases = True
    tasks = []
    started = time.perf_counter()
    for tick in range(RATE_SECONDS * 100):  # 10 messages every 10 ms
        tasks.append(asyncio.create_task(send(api, users, q, RATE // 100, sent, posts, posted)))
        delay = started + (tick + 1) / 100 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.gather(*tasks)
    await wait_acked(watcher, sent)
    return [(watcher.acked[m] - t) * 1000 for m, t in sent.items()], posts, watcher.phase_p50s(posted)


async def bench(host: Any) -> None:
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    async with Users(host.url, 64, timeout=60) as users:
        client = users.all[0]
        name = "bench-" + uuid.uuid4().hex[:8]
        assert (await client.post("/v2/spaces", json={"name": name}, headers=admin)).status_code == 201
        resp = await client.post(
            "/v2/tokens",
            headers=admin,
            json={"principal": f"ed-{name}", "grants": [{"space": name, "role": "editor"}], "admin": False},
        )
        api = Api(client, SpaceFixture(name, resp.json()["token"], ""))
        raw = await raw_kafka(host.settings.kafka_bootstrap)
        watcher = AckWatcher(host.settings)
        await watcher.start()
        try:
            queues = await warmed_queues(api, users, watcher)
            procs = processes(host)  # the queue's runtime included: it started with the warm-up
            wal = _wal_bytes(host.settings.database_url)
            with cpu_seconds(procs, "(b)"), profiled(procs, "(b)"):
                e2e, lat = await end_to_end(api, users, watcher, queues)
            await projected(api, queues, acknowledged=100 * len(queues) + E2E_N)
            wal_per_message = (_wal_bytes(host.settings.database_url) - wal) / E2E_N
            rate_lat, rate_posts, rate_phases = await offered_rate(api, users, watcher)
            scaled = await with_replicas(host, api, users, watcher) if REPLICAS > 1 else None
        finally:
            await watcher.stop()
    print()
    print(f"(a) raw aiokafka produce->consume, 1 KiB, acks=all: {raw:10.0f} msg/s  (n={RAW_N})")
    print(
        f"(b) sumi HTTP send -> JS handler -> ack committed:   {e2e:10.0f} msg/s  (n={E2E_N}, "
        f"{SENDERS} senders, maxBatchSize 100, maxConcurrency 10)"
    )
    print(f"    latency p50 {pct(lat, 50):8.1f} ms   p99 {pct(lat, 99):8.1f} ms   mean {statistics.fmean(lat):8.1f} ms")
    print(f"    Postgres WAL written per message sent, delivered and acknowledged: {wal_per_message:,.0f} bytes")
    print(f"(c) ratio b/a: {e2e / raw:.3f}")
    print(
        f"(d) at {RATE} msg/s offered for {RATE_SECONDS}s: latency p50 {pct(rate_lat, 50):.1f} ms"
        f"   p99 {pct(rate_lat, 99):.1f} ms; the POST alone p50 {pct(rate_posts, 50):.1f} ms"
        f"   p99 {pct(rate_posts, 99):.1f} ms"
    )
    print(f"    where a message's time goes, p50 ms: {json.dumps(rate_phases)}")
    if scaled is not None:
        print(
            f"(e) (b) with {REPLICAS} queue engine replicas: {scaled:10.0f} msg/s  ({scaled / e2e:.2f}x one replica, "
            f"{QUEUES} queues, {os.cpu_count()} cores)"
        )
    met = {True: "met", False: "NOT met"}
    print(
        f"targets (issue 16): >= 10000 msg/s end to end: {met[e2e >= 10_000]}; >= 20 % of raw: {met[e2e >= raw / 5]};"
        f" send -> ack p50 <= 20 ms at 1000 msg/s: {met[RATE == 1000 and pct(rate_lat, 50) <= 20]}"
    )


async def with_replicas(host: Any, api: Api, users: Users, watcher: AckWatcher) -> float:
    """(b) again, with REPLICAS - 1 more queue engines sharing the partitions."""
    procs = [serve_replica(host, "queue", f"bench-{i}") for i in range(1, REPLICAS)]
    try:
        await stable_members(
            host.settings.kafka_bootstrap, [f"{host.settings.topic_prefix}-queue-engine"], REPLICAS, 120
        )
        e2e, _ = await end_to_end(api, users, watcher, await warmed_queues(api, users, watcher))
        return e2e
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


async def projected(api: Api, queues: list[str], acknowledged: int, timeout: float = 120) -> None:
    """Until the queue projection has applied this many acknowledgements (its writes are in the
    WAL figure: the acknowledgements readable in the log do not say it has)."""
    deadline = time.monotonic() + timeout
    while sum([(await api.stats(q))["acknowledged"] for q in queues]) < acknowledged:
        if time.monotonic() > deadline:
            raise TimeoutError("the queue projection did not catch up")
        await asyncio.sleep(0.2)


def _wal_bytes(database_url: str) -> int:
    """Where Postgres's write-ahead log stands: what the read models cost it to write, a figure
    no other load on the machine changes (unlike the times above)."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
        assert row is not None
        return int(row[0])


def main() -> None:
    with parts() as (kafka, db):
        extra = json.loads(os.environ.get("BENCH_SETTINGS", "{}"))  # any other Settings field
        with running_host(new_settings(kafka, db, **extra)) as host:
            asyncio.run(bench(host))


if __name__ == "__main__":
    main()
