"""The topics, their partitioning and cleanup policies, and the one idempotent bootstrap step.

Commands and control records share one key (the Space, or `_admin`) and one
partition count, so the owner of a command partition owns the same partition
of the control log, which is its changelog: state is the fold of it.
"""

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from sumi.core.config import Settings

ADMIN_KEY = "_admin"
# A WorkerVersion's modules may total 10 MiB (forms.md); its create command and its
# ResourceCreated carry them, so the control topics and producers take 16 MiB records.
MAX_RECORD_BYTES = 16 * 1024 * 1024
# A quarantined record carries the raw bytes it set aside (any size a source topic took) and
# a few fields about them; every producer that may quarantine takes records this large.
QUARANTINE_RECORD_BYTES = MAX_RECORD_BYTES + 64 * 1024


KEY_TOPIC = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60_000),
    "max.compaction.lag.ms": str(60 * 60_000),
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": str(86400_000),
}


LOG_TOPIC = {
    "cleanup.policy": "delete",
    "retention.ms": str(7 * 86400_000),
    "retention.bytes": str(1 << 30),
    "segment.ms": str(3600_000),
}


@dataclass(frozen=True)
class TopicSpec:
    name: str
    config: dict[str, str]


def topic_specs(settings: Settings) -> list[TopicSpec]:
    # Every write is acks=all: a topic whose min.insync.replicas (the cluster's default unless
    # set here) exceeds its replication answers NotEnoughReplicas forever, so each topic names
    # its own, never more than it has replicas, and two where there are two to lose one of.
    isr = {"min.insync.replicas": str(min(settings.replication, 2))}
    return [TopicSpec(t.name, {**t.config, **isr}) for t in _specs(settings)]


def _specs(settings: Settings) -> list[TopicSpec]:
    forever = {"cleanup.policy": "delete", "retention.ms": "-1"}
    large = {"max.message.bytes": str(MAX_RECORD_BYTES)}
    return [
        TopicSpec(
            settings.topic("commands"), {"cleanup.policy": "delete", "retention.ms": str(7 * 86400_000), **large}
        ),
        TopicSpec(settings.topic("control"), {**forever, **large}),
        TopicSpec(settings.topic("queue"), forever),
        # Workflow commands (create/event/terminate) keyed by instance key, like the instance log,
        # so the engine owning a partition of one owns the same partition of the other.
        TopicSpec(
            settings.topic("workflow.commands"),
            {"cleanup.policy": "delete", "retention.ms": str(7 * 86400_000), **large},
        ),
        # The instance log is the workflow engine's changelog: kept forever; retention (WF-47)
        # is an InstancePurged record, not a broker setting.
        TopicSpec(settings.topic("workflow"), {**forever, **large}),
        # The data keys that seal the instance log's documents (sumi.core.sealing): compacted, so a
        # purge's tombstone takes the key itself off the broker once the cleaner has passed. The
        # cleaner may leave a dirty segment alone for at most an hour (a segment rolls after ten
        # minutes, and any dirt makes it cleanable), and a tombstone stays a day, for readers
        # that are catching up.
        TopicSpec(settings.topic("workflow.keys"), KEY_TOPIC),
        # The engines' snapshots (sumi.engines.snapshots): compacted to about one per
        # partition; a start reads the latest and folds only the queue log after it.
        TopicSpec(settings.topic("queue.snapshots"), {**KEY_TOPIC, "max.message.bytes": str(4 << 20)}),
        # The workflow engine's, the same way: its documents sealed as on the instance log.
        TopicSpec(settings.topic("workflow.snapshots"), {**KEY_TOPIC, "max.message.bytes": str(4 << 20)}),
        # The dead letters of the processors themselves: what they could not decode or apply.
        TopicSpec(settings.topic("quarantine"), {**forever, "max.message.bytes": str(QUARANTINE_RECORD_BYTES)}),
        # What workers print: read by `GET …/logs`, kept a week and at most 1 GiB per partition,
        # whichever ends first (a Space's flood ages out, it never grows the broker without bound).
        TopicSpec(settings.topic("logs"), LOG_TOPIC),
        # Each service process's latest metrics (sumi.engines.exporter): compacted to one per
        # process, and gone a day after the process stopped sending.
        TopicSpec(
            settings.topic("metrics"), {**KEY_TOPIC, "cleanup.policy": "compact,delete", "retention.ms": str(86400_000)}
        ),
    ]


def instance_key(workflow_uid: str, instance_id: str) -> str:
    """The key of an instance on both workflow topics: one owner decides each instance."""
    return f"{workflow_uid}/{instance_id}"


def log_key(space: str, worker_uid: str) -> str:
    """The key of a worker's lines on the log topic: one partition holds all of one worker's."""
    return f"{space}/{worker_uid}"


Location = tuple[int, int]  # (partition, offset) of a record on a topic


@functools.lru_cache(maxsize=1 << 16)
def partition_for(key: str, partitions: int) -> int:
    """Kafka's default partitioner (murmur2), so Java clients agree with us. aiokafka's murmur2
    is pure Python, and an engine asks again for every record of a key (an instance's steps):
    a bounded cache of the keys in use answers those."""
    from aiokafka.partitioner import murmur2

    return (int(murmur2(key.encode())) & 0x7FFFFFFF) % partitions


async def ensure_topics(settings: Settings) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(t.name, settings.partitions, settings.replication, topic_configs=t.config)
            for t in topic_specs(settings)
            if t.name not in existing
        ]
        if missing:
            try:
                await admin.create_topics(missing)
            except TopicAlreadyExistsError:
                pass  # another process won the race: same topics, same settings
        present = [t for t in topic_specs(settings) if t.name in existing]
        if present:  # an older install's topics get today's settings (AlterConfigs sets them whole)
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, t.name, t.config) for t in present])
        await _coordinators_ready(admin, settings.topic_prefix)
    finally:
        await admin.close()


async def _coordinators_ready(admin: Any, prefix: str, timeout: float = 60.0) -> None:
    """Wait until the broker names a group and a transaction coordinator. A new cluster creates
    its offsets and transaction-state topics on the first ask; a service that asked first would
    log that as an error and retry."""
    from aiokafka.errors import KafkaError

    deadline = asyncio.get_running_loop().time() + timeout
    for kind in (0, 1):  # FindCoordinator key types: group, transaction
        while True:
            try:
                await admin.find_coordinator(f"{prefix}-ready", kind)
                break
            except KafkaError:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.1)
