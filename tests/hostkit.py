"""A Host of the test's own (sumi.testing, the kit worker authors use too), and this project's helpers around it."""

import asyncio
import contextlib
import os
import signal
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
from sumi.host.supervisor import stop_all
from sumi.infra.lifeline import ENV as LIFELINE
from sumi.testing import Host, new_settings, running_host, start_host
from sumi.wire import codec

__all__ = [
    "Host",
    "SpaceFixture",
    "control_log",
    "every_replica",
    "hold_every",
    "kill_every",
    "new_settings",
    "new_space",
    "release_every",
    "replicas_beside",
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


# The processors that scale out, and the consumer groups each of their replicas joins.
SCALED = ("control", "verifier", "projections", "queue", "workflow")
GROUPS = (
    "control",
    "verifier",
    "queue-engine",
    "workflow-engine",
    "projection-{schema}-control",
    "projection-{schema}-queue",
    "projection-{schema}-workflow",
)
REPLICA_GRACE = 10.0  # seconds a stopped replica has to close before it is killed


def processor_groups(settings: Settings) -> list[str]:
    """The consumer groups of a Host's scalable processors."""
    return [f"{settings.topic_prefix}-{g.format(schema=settings.db_schema)}" for g in GROUPS]


def serve_replica(
    host: Host, service: str, name: str, env: dict[str, str] | None = None, **popen: Any
) -> "subprocess.Popen[bytes]":
    """Another replica of a Host's service: `sumi serve SERVICE` with its own replica name."""
    env = {**os.environ, **host.settings.to_env(), **(env or {}), "SUMI_REPLICA": name}
    return subprocess.Popen([sys.executable, "-m", "sumi.cli", "serve", service], env=env, **popen)


class Added:
    """The replicas a test run added beside a Host's supervised services, which a test that kills
    or holds a service (`kill_every`, `hold_every`) stops and starts again under their names."""

    def __init__(self, host: Host, count: int, env: dict[str, str] | None) -> None:
        self.host, self.names, self.env = host, [f"replica-{n}" for n in range(2, count + 1)], env
        self.procs: dict[str, list[subprocess.Popen[bytes]]] = {}

    def start(self, service: str) -> None:
        # A lifeline on stdin and a session of its own: gone with the test run, runtimes and all.
        env = {**(self.env or {}), LIFELINE: "stdin"}
        self.procs[service] = [
            serve_replica(self.host, service, name, env, stdin=subprocess.PIPE, start_new_session=True)
            for name in self.names
        ]

    def stop(self, service: str, sig: int = signal.SIGTERM) -> None:
        procs = self.procs.pop(service, [])
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(sig)
        stop_all(procs, REPLICA_GRACE, signalled=True)


_ADDED: dict[str, Added] = {}  # by the Host's URL


@contextlib.contextmanager
def replicas_beside(host: Host, count: int, env: dict[str, str] | None = None) -> Iterator[Host]:
    """The Host with `count` replicas of each scalable processor in all: the supervised one and
    `count - 1` more, each joined to its groups before the block starts, stopped when it ends.
    `env` is what the Host's own services were given beyond its settings (an engine mode)."""
    added = _ADDED[host.url] = Added(host, count, env)
    try:
        if count > 1:
            for service in SCALED:
                added.start(service)
            asyncio.run(stable_members(host.settings.kafka_bootstrap, processor_groups(host.settings), count, 180))
        yield host
    finally:
        del _ADDED[host.url]
        for service in SCALED:
            added.stop(service)


def every_replica(host: Host, service: str) -> list[int]:
    """The pids of every replica of a Host's service: the supervised one and any added."""
    added = _ADDED.get(host.url)
    return [host.supervisor.procs[service].pid] + [p.pid for p in (added.procs if added else {}).get(service, [])]


def kill_every(host: Host, service: str) -> None:
    """SIGKILL every replica of a service; each restarts under its name (a crash of the service)."""
    added = _ADDED.get(host.url)
    for proc in added.procs.get(service, []) if added else []:
        proc.send_signal(signal.SIGKILL)  # at the moment the supervised one is killed
    host.supervisor.kill(service)
    if added and service in added.procs:
        added.stop(service, signal.SIGKILL)
        added.start(service)


def hold_every(host: Host, service: str) -> None:
    """Stop every replica of a service until `release_every` (an outage of the service)."""
    host.supervisor.hold(service)
    added = _ADDED.get(host.url)
    if added and service in added.procs:
        added.stop(service)


def release_every(host: Host, service: str) -> None:
    """The end of `hold_every`'s outage: every replica of the service starts again."""
    added = _ADDED.get(host.url)
    if added and added.names and service not in added.procs:
        added.start(service)
    host.supervisor.release(service)
