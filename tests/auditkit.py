"""An auditor's look at a Host's topics: every record of every topic of its prefix, raw bytes, all
partitions, from the beginning (uncommitted records included: an auditor reads what the broker
holds), and what can be read there, in plain text or after opening sealed documents with every
key the key topic still holds."""

import dataclasses
from typing import Any

from aiokafka import AIOKafkaConsumer

from sumi.core import records as r
from sumi.core import sealing
from sumi.core.config import Settings
from sumi.wire import codec, kafka


@dataclasses.dataclass
class Topics:
    messages: list[Any]  # every record: .topic, .key, .value
    keys: list[r.DataKey]  # the keys alive: the fold of the key topic (a tombstone drops its key)

    def plain(self, marker: str) -> list[str]:
        """Where `marker` stands in plain bytes (key or value)."""
        needle = marker.encode()
        return [
            f"{m.topic}[{m.partition}]@{m.offset}"
            for m in self.messages
            if needle in (m.value or b"") or needle in (m.key or b"")
        ]

    def opened(self, marker: str) -> list[str]:
        """Where `marker` stands in a sealed document opened with any key still alive."""
        return [
            f"{m.topic}[{m.partition}]@{m.offset}"
            for m in self.messages
            for text in _sealed(m.value)
            for key in self.keys
            if marker in (sealing.unseal(key, text) or "")
        ]

    def readable(self, marker: str) -> list[str]:
        return self.plain(marker) + self.opened(marker)


def _sealed(value: bytes | None) -> list[str]:
    try:
        record = codec.decode(value or b"")
    except codec.Undecodable:
        return []
    return [v for v in dataclasses.asdict(record).values() if isinstance(v, str) and sealing.is_sealed(v)]


async def read_topics(settings: Settings) -> Topics:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap, isolation_level="read_uncommitted", enable_auto_commit=False
    )
    await consumer.start()
    try:
        topics = sorted(t for t in await consumer.topics() if t.startswith(settings.topic_prefix + "."))
        tps = [tp for t in topics for tp in await kafka.partitions(consumer, t)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        messages: list[Any] = []
        async for batch in kafka.batches(consumer, ends, timeout_ms=500):
            messages += [m for ms in batch.values() for m in ms]
    finally:
        await consumer.stop()
    return Topics(messages, _alive(messages, settings.topic("workflow.keys")))


def _alive(messages: list[Any], topic: str) -> list[r.DataKey]:
    keys: dict[bytes, r.DataKey] = {}
    for m in messages:
        if m.topic != topic or m.key is None:
            continue
        if m.value is None:
            keys.pop(m.key, None)
        elif isinstance(record := codec.decode(m.value), r.DataKey):
            keys[m.key] = record
    return list(keys.values())
