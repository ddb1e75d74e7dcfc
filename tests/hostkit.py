"""A Host of the test's own (sumi.testing, the kit worker authors use too), and this project's helpers around it."""

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sumi.core.config import Settings
from sumi.testing import Host, new_settings, running_host, start_host
from sumi.wire import codec

__all__ = [
    "Host",
    "SpaceFixture",
    "control_log",
    "new_settings",
    "new_space",
    "running_host",
    "stable_members",
    "start_host",
]


@dataclass
class SpaceFixture:
    """A Space of a test's own, with an editor's and a viewer's token."""

    name: str
    editor_token: str
    viewer_token: str

    def __iter__(self) -> Iterator[str]:
        """Unpacks as (name, editor_token, viewer_token)."""
        return iter((self.name, self.editor_token, self.viewer_token))


async def new_space(host: Host) -> SpaceFixture:
    """A fresh Space with an editor and a viewer token, made over HTTP by the admin."""
    name = "sp-" + uuid.uuid4().hex[:10]
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    async with httpx.AsyncClient(base_url=host.url, timeout=30) as client:
        r = await client.post("/v2/spaces", json={"name": name}, headers=admin)
        assert r.status_code == 201, r.text
        tokens = []
        for role in ("editor", "viewer"):
            r = await client.post(
                "/v2/tokens",
                headers=admin,
                json={"principal": f"{role}-{name}", "grants": [{"space": name, "role": role}], "admin": False},
            )
            assert r.status_code == 201, r.text
            tokens.append(r.json()["token"])
    return SpaceFixture(name, tokens[0], tokens[1])


async def control_log(host: Host) -> list[object]:
    """Every committed record of the Host's control log so far, decoded, in log order per partition."""
    return await committed_log(host, "control")


async def committed_log(host: Host, topic: str) -> list[Any]:
    """Every committed record of one of the Host's topics so far, decoded, in log order per partition."""
    consumer = AIOKafkaConsumer(
        host.settings.topic(topic),
        auto_offset_reset="earliest",
        bootstrap_servers=host.settings.kafka_bootstrap,
        isolation_level="read_committed",
    )
    await consumer.start()
    out: list[Any] = []
    try:
        while batch := await consumer.getmany(timeout_ms=1500):
            out += [codec.decode(m.value) for ms in batch.values() for m in ms if m.value is not None]
    finally:
        await consumer.stop()
    return out


async def committed_messages(settings: Settings, topic: str) -> list[Any]:
    """Every committed message of one of a Host's topics up to its end now (`committed_in`)."""
    return await committed_in(settings.kafka_bootstrap, settings.topic(topic), settings.partitions)


async def committed_in(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every committed message of a topic up to its end now, with its partition and offset, in
    log order per partition (read to the end offsets, not to a quiet fetch)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        got: list[Any] = []
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                got += messages
        return got
    finally:
        await consumer.stop()


@contextlib.asynccontextmanager
async def scratch_topic(bootstrap: str, prefix: str, partitions: int) -> AsyncIterator[str]:
    """A topic of a test's own, deleted after it."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
        yield name
        await admin.delete_topics([name])
    finally:
        await admin.close()


async def stable_members(bootstrap: str, groups: Iterable[str], n: int, timeout: float = 90) -> None:
    """Until each consumer group is Stable with n members (replicas joined, or a dead one gone)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        for group in groups:
            while True:
                (resp,) = await admin.describe_consumer_groups([group])
                (described,) = resp.groups
                if described[2] == "Stable" and len(described[5]) == n:
                    break
                assert time.monotonic() < deadline, f"{group} never had {n} stable members"
                await asyncio.sleep(0.5)
    finally:
        await admin.close()


def serve_replica(host: Host, service: str, name: str, **popen: Any) -> "subprocess.Popen[bytes]":
    """Another replica of a Host's service: `sumi serve SERVICE` with its own replica name."""
    env = {**os.environ, **host.settings.to_env(), "SUMI_REPLICA": name}
    return subprocess.Popen([sys.executable, "-m", "sumi.cli", "serve", service], env=env, **popen)
