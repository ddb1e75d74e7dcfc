"""A Host of the test's own: its services as child processes on fresh topics and schema."""

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from aiokafka import AIOKafkaConsumer

from sumi.core import codec
from sumi.core.config import Settings
from sumi.infra import free_port
from sumi.supervisor import Supervisor


def new_settings(kafka_bootstrap: str, database_url: str, **overrides: object) -> Settings:
    """Settings for a Host of its own: fresh topics, fresh schema, a free port."""
    tag = uuid.uuid4().hex[:8]
    values: dict[str, object] = dict(
        kafka_bootstrap=kafka_bootstrap,
        database_url=database_url,
        topic_prefix=f"t{tag}",
        db_schema=f"s{tag}",
        partitions=3,
        http_port=free_port(),
        decision_timeout=10.0,
    )
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@dataclass
class Host:
    url: str
    admin_token: str
    settings: Settings
    supervisor: Supervisor


def start_host(settings: Settings, env: dict[str, str] | None = None) -> Host:
    """A Host up to ready; `env` adds variables its services read beyond Settings (e.g. engine modes)."""
    from sumi._bootstrap import issue_admin_token, prepare

    token = "sumi_test_" + uuid.uuid4().hex
    asyncio.run(prepare(settings))
    sup = Supervisor(settings, env=env).start()
    try:
        asyncio.run(issue_admin_token(settings, token))
        sup.wait_ready()
    except BaseException:
        sup.stop()
        raise
    return Host(sup.url, token, settings, sup)


@contextmanager
def running_host(settings: Settings, env: dict[str, str] | None = None) -> Iterator[Host]:
    """A started Host, stopped again however the block ends."""
    host = start_host(settings, env)
    try:
        yield host
    finally:
        host.supervisor.stop()


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
    consumer = AIOKafkaConsumer(
        host.settings.topic("control"),
        auto_offset_reset="earliest",
        bootstrap_servers=host.settings.kafka_bootstrap,
        isolation_level="read_committed",
    )
    await consumer.start()
    out: list[object] = []
    try:
        while batch := await consumer.getmany(timeout_ms=1500):
            out += [codec.decode(m.value) for ms in batch.values() for m in ms]
    finally:
        await consumer.stop()
    return out
