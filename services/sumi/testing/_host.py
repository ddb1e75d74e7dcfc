"""A Host of a test's own: its services as child processes on fresh topics and schema."""

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sumi.core.config import Settings
from sumi.host.supervisor import Supervisor
from sumi.infra import free_port


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
    from sumi.host.bootstrap import issue_admin_token, prepare

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
