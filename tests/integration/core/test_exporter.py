"""A service's metrics snapshots on a real broker: a registry that changed goes out every round,
one that stood still only every UNCHANGED_EVERY_S (issue 40, idle is idle).

No requirement ID applies: the requirements say what a Host answers, not what it costs while
nothing happens; the targets are issue 40's (`tests/bench/bench_idle.py`)."""

import asyncio
import contextlib
import uuid
from collections import Counter as Tally

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from prometheus_client import CollectorRegistry, Counter

from sumi.core.config import Settings
from sumi.engines import exporter
from sumi.wire import kafka

pytestmark = pytest.mark.integration


async def sent_by_service(bootstrap: str, topic: str) -> Tally[str]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    keys: Tally[str] = Tally()
    try:
        await kafka.read_to_end(
            consumer, [TopicPartition(topic, 0)], lambda m, _: keys.update([m.key.decode().split("/", 1)[0]])
        )
    finally:
        await consumer.stop()
    return keys


async def test_an_unchanged_registry_is_sent_rarely_and_a_changed_one_every_round(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exporter, "EVERY_S", 0.05)
    monkeypatch.setattr(exporter, "UNCHANGED_EVERY_S", 0.6)
    prefix = f"exp-{uuid.uuid4().hex[:8]}"
    settings = Settings(kafka_bootstrap=kafka_bootstrap, database_url="", topic_prefix=prefix, partitions=1)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(settings.topic("metrics"), 1, 1)])
    finally:
        await admin.close()
    still, moving = CollectorRegistry(), CollectorRegistry()
    Counter("still_total", "never moves", registry=still)
    moved = Counter("moved_total", "moves every round", registry=moving)

    async def bump() -> None:
        moved.inc()

    tasks = [
        asyncio.create_task(exporter.export(settings, "still", still)),
        asyncio.create_task(exporter.export(settings, "moving", moving, bump)),
    ]
    await asyncio.sleep(2.0)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    sent = await sent_by_service(kafka_bootstrap, settings.topic("metrics"))
    assert 2 <= sent["still"] <= 5, sent  # its first, then one per 0.6 s: 3 or 4 in 2 s
    assert sent["moving"] >= 10, sent  # every 0.05 s round (fewer on a loaded machine, never 4)
