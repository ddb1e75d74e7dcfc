"""Crash test: 10,000 messages while the queue engine (and the runtime it owns) is SIGKILLed.

A producer sends 100 batches of 100 messages over HTTP (each POST retried with its
Idempotency-Key until it is answered). Meanwhile the supervisor's `queue` service
is killed with SIGKILL several times and restarted. At the end the settlement
history read straight from the queue log must show every sent message acknowledged
exactly once (or dead-lettered), nothing lost, and the stats must add up.
"""

import asyncio
import sys
import time
import uuid
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from sumi.core import records as r
from sumi.wire import codec
from tests.conformance.kit import Api
from tests.httpkit import b64

pytestmark = pytest.mark.integration

TOTAL, PER_POST = 10_000, 100
KILLS = 4
WORKER = """
export default { async queue(batch, env) {
  // half the batches settle one by one, the others by returning (QC-31)
  if (batch.messages[0].id.charCodeAt(batch.messages[0].id.length - 1) % 2) {
    for (const m of batch.messages) await batch.acknowledge(m.id);
  }
} };
"""


async def produce(api: Api, queue: str) -> list[str]:
    ids: list[str] = []
    for i in range(TOTAL // PER_POST):
        key = f"chaos-{queue}-{i}"
        body = {"messages": [{"body": b64(f"m-{i}-{j}".ljust(64, "."))} for j in range(PER_POST)]}
        for _ in range(60):
            try:
                resp = await api.c.post(
                    f"/v2/spaces/{api.space}/queues/{queue}/messages",
                    headers={**api.h, "Idempotency-Key": key},
                    json=body,
                )
                if resp.status_code == 202:
                    ids += resp.json()["messageIds"]
                    break
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"send {i} never accepted")
        await asyncio.sleep(0.01)
    return ids


async def kill_repeatedly(host: Any) -> None:
    for _ in range(KILLS):
        await asyncio.sleep(4)
        await asyncio.to_thread(host.supervisor.kill, "queue")


async def history(settings: Any, queue: str) -> list[Any]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        topic = settings.topic("queue")
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        while any([await consumer.position(tp) < end for tp, end in ends.items()]):
            for msgs in (await consumer.getmany(timeout_ms=500, max_records=10_000)).values():
                for m in msgs:
                    rec = codec.decode(m.value)
                    if getattr(rec, "queueUid", None) == queue:
                        out.append(rec)
        return out
    finally:
        await consumer.stop()


async def test_nothing_lost_through_engine_crashes(client: httpx.AsyncClient, space: Any, host: Any) -> None:
    # QC-43, QC-44, QC-45: restarts lose nothing and infer no ACK
    api = Api(client, space)
    q, dlq = await api.queue(), await api.queue()
    w = await api.worker(WORKER)
    await api.consumer(q, w, maxBatchSize=100, maxConcurrency=10, maxRetries=100, deadLetterQueue={"resourceUid": dlq})
    started = time.monotonic()
    sent, _ = await asyncio.gather(produce(api, q), kill_repeatedly(host))
    assert len(set(sent)) == TOTAL
    deadline = time.monotonic() + 150
    while True:
        s = await api.stats(q)
        if s["acknowledged"] + s["deadLettered"] + s["discarded"] >= TOTAL and s["inFlight"] == 0:
            break
        assert time.monotonic() < deadline, f"stuck: {s}"
        await asyncio.sleep(0.5)
    log = await history(host.settings, q)
    accepted = [x.messageId for x in log if isinstance(x, r.MessageAccepted)]
    acked = [m for x in log if isinstance(x, r.MessagesAcknowledged) for m in x.messageIds]
    dead = [x.messageId for x in log if isinstance(x, r.MessageDeadLettered)]
    retried = [x for x in log if isinstance(x, r.MessageRetryScheduled)]
    delivered = [m for x in log if isinstance(x, r.BatchDelivered) for m in x.messageIds]
    assert set(accepted) == set(sent)  # every send is in the log (a re-sent POST is deduplicated)
    assert len(acked) == len(set(acked))  # each settled once
    assert set(acked) | set(dead) == set(sent) and not set(acked) & set(dead)
    assert set(delivered) >= set(sent)
    s = await api.stats(q)
    assert (s["acknowledged"], s["deadLettered"], s["discarded"]) == (len(acked), len(dead), 0)
    assert s["ready"] == s["delayed"] == s["inFlight"] == 0
    assert s["retried"] == len(retried)
    assert (await api.stats(dlq))["ready"] == len(dead)
    print(
        f"\n{TOTAL} messages, {KILLS} engine kills, {len(delivered)} deliveries, "
        f"{len(retried)} redeliveries, {len(dead)} dead-lettered, "
        f"{time.monotonic() - started:.1f}s",
        file=sys.stderr,
    )
    _ = uuid
