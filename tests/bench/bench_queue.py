"""Queue throughput and latency against the broker's own limit. Run: python -m tests.bench.bench_queue

(a) raw aiokafka: produce N messages of 1 KiB and consume them back on the same
    broker (acks=all, read_committed): the physical floor of this machine.
(b) sumi end to end: HTTP send (batches of 100) -> queue engine -> JS handler
    (returns: implicit ack) -> ack committed, with maxBatchSize 100, maxConcurrency
    10. Latency per message = time its MessagesAcknowledged is readable (committed)
    minus the start of the POST that sent it.
(c) the ratio b/a, and (d) p50/p99 latency at 1,000 messages/s offered (BENCH_RATE sets another).
Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import os
import statistics
import time
import uuid
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sumi.core import codec
from sumi.core import records as r
from tests.conformance.kit import Api
from tests.hostkit import SpaceFixture, new_settings, running_host

RAW_N = int(os.environ.get("BENCH_RAW_N", "50000"))
E2E_N = int(os.environ.get("BENCH_E2E_N", "30000"))
SENDERS = int(os.environ.get("BENCH_SENDERS", "8"))
RATE, RATE_SECONDS = int(os.environ.get("BENCH_RATE", "1000")), 10
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


class AckWatcher:
    """Reads the queue log (read_committed) and notes when each message's ACK is readable."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.acked: dict[str, float] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            fetch_max_wait_ms=5,
        )
        await self.consumer.start()
        topic = self.settings.topic("queue")
        tps = [TopicPartition(topic, p) for p in range(self.settings.partitions)]
        self.consumer.assign(tps)
        await self.consumer.seek_to_end(*tps)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            batch = await self.consumer.getmany(timeout_ms=100, max_records=10_000)
            now = time.perf_counter()
            for msgs in batch.values():
                for m in msgs:
                    if m.value[2:10] != _ACK_FP:
                        continue
                    rec = codec.decode(m.value)
                    if isinstance(rec, r.MessagesAcknowledged):
                        for mid in rec.messageIds:
                            self.acked[mid] = now

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()


@functools.cache
def send_body(n: int) -> bytes:
    """The JSON of a send of n messages, built once (a client's cost, not the Host's)."""
    return json.dumps({"messages": [{"body": base64.b64encode(BODY).decode()}] * n}).encode()


async def send(api: Api, queue: str, n: int, sent: dict[str, float]) -> None:
    t = time.perf_counter()
    resp = await api.c.post(
        f"/v2/spaces/{api.space}/queues/{queue}/messages",
        headers={**api.h, "content-type": "application/json"},
        content=send_body(n),
    )
    assert resp.status_code == 202, resp.text
    for mid in resp.json()["messageIds"]:
        sent[mid] = t


async def wait_acked(watcher: AckWatcher, sent: dict[str, float], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    missing = set(sent)
    while missing:
        missing = {m for m in missing if m not in watcher.acked}
        if missing and time.monotonic() > deadline:
            raise TimeoutError(f"{len(missing)} messages never acknowledged")
        await asyncio.sleep(0.05)


async def end_to_end(api: Api, watcher: AckWatcher) -> tuple[float, list[float]]:
    q = await api.queue()
    w = await api.worker(WORKER)
    await api.consumer(q, w, maxBatchSize=100, maxConcurrency=10, maxBatchTimeoutSeconds=0)
    warm: dict[str, float] = {}
    await send(api, q, 100, warm)
    await wait_acked(watcher, warm)
    sent: dict[str, float] = {}
    posts = E2E_N // 100
    queue_of_posts: asyncio.Queue[int] = asyncio.Queue()
    for i in range(posts):
        queue_of_posts.put_nowait(i)

    async def sender() -> None:
        while not queue_of_posts.empty():
            queue_of_posts.get_nowait()
            await send(api, q, 100, sent)

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(SENDERS)))
    await wait_acked(watcher, sent)
    elapsed = max(watcher.acked[m] for m in sent) - started
    return len(sent) / elapsed, [(watcher.acked[m] - t) * 1000 for m, t in sent.items()]


async def offered_rate(api: Api, watcher: AckWatcher) -> list[float]:
    q = await api.queue()
    w = await api.worker(WORKER)
    await api.consumer(q, w, maxBatchSize=100, maxConcurrency=10, maxBatchTimeoutSeconds=0)
    warm: dict[str, float] = {}
    await send(api, q, 10, warm)
    await wait_acked(watcher, warm)
    sent: dict[str, float] = {}
    tasks = []
    started = time.perf_counter()
    for tick in range(RATE_SECONDS * 100):  # 10 messages every 10 ms
        tasks.append(asyncio.create_task(send(api, q, RATE // 100, sent)))
        delay = started + (tick + 1) / 100 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    await asyncio.gather(*tasks)
    await wait_acked(watcher, sent)
    return [(watcher.acked[m] - t) * 1000 for m, t in sent.items()]


async def bench(host: Any) -> None:
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    async with httpx.AsyncClient(
        base_url=host.url, timeout=60, limits=httpx.Limits(max_connections=64, keepalive_expiry=2.0)
    ) as client:
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
            e2e, lat = await end_to_end(api, watcher)
            rate_lat = await offered_rate(api, watcher)
        finally:
            await watcher.stop()
    print()
    print(f"(a) raw aiokafka produce->consume, 1 KiB, acks=all: {raw:10.0f} msg/s  (n={RAW_N})")
    print(
        f"(b) sumi HTTP send -> JS handler -> ack committed:   {e2e:10.0f} msg/s  (n={E2E_N}, "
        f"{SENDERS} senders, maxBatchSize 100, maxConcurrency 10)"
    )
    print(f"    latency p50 {pct(lat, 50):8.1f} ms   p99 {pct(lat, 99):8.1f} ms   mean {statistics.fmean(lat):8.1f} ms")
    print(f"(c) ratio b/a: {e2e / raw:.3f}")
    print(
        f"(d) at {RATE} msg/s offered for {RATE_SECONDS}s: latency p50 {pct(rate_lat, 50):.1f} ms"
        f"   p99 {pct(rate_lat, 99):.1f} ms"
    )
    print(
        f"targets: >= 5000 msg/s end to end: {'met' if e2e >= 5000 else 'NOT met'}; "
        f"p50 < 100 ms at 1000 msg/s: {'met' if pct(rate_lat, 50) < 100 else 'NOT met'}"
    )


def main() -> None:
    from sumi.infra import KafkaBroker, PostgresServer

    with contextlib.ExitStack() as stack:
        kafka = os.environ.get("SUMI_KAFKA_BOOTSTRAP") or stack.enter_context(KafkaBroker()).bootstrap
        db = os.environ.get("SUMI_DATABASE_URL") or stack.enter_context(PostgresServer()).url
        with running_host(new_settings(kafka, db)) as host:
            asyncio.run(bench(host))


if __name__ == "__main__":
    main()
