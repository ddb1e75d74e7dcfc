"""Session fixtures: one real Kafka broker and one real PostgreSQL for the whole run.

Each comes from, in order: the SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL
variables (external ones); testcontainers (`apache/kafka`, `postgres`) when a
Docker engine is reachable; else the local launchers `sumi up` uses. Tests
isolate by a topic prefix and database schema per Host and a Space per test.
"""

import os
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from hypothesis import settings as hypothesis_settings

from sumi.infra import KafkaBroker, PostgresServer
from tests.hostkit import Host, SpaceFixture, new_settings, new_space, running_host

# Properties, not timings: a loaded 2-core CI machine must not fail a test by its clock.
hypothesis_settings.register_profile("sumi", deadline=None)
hypothesis_settings.load_profile("sumi")


def _docker_reachable() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    if os.environ.get("SUMI_KAFKA_BOOTSTRAP"):
        yield os.environ["SUMI_KAFKA_BOOTSTRAP"]
    elif _docker_reachable():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.1").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        with KafkaBroker() as broker:
            yield broker.bootstrap


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    if os.environ.get("SUMI_DATABASE_URL"):
        yield os.environ["SUMI_DATABASE_URL"]
    elif _docker_reachable():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:17", driver=None) as pg:
            yield pg.get_connection_url()
    else:
        with PostgresServer() as pg:
            yield pg.url


@pytest.fixture(scope="session")
def host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    with running_host(new_settings(kafka_bootstrap, database_url)) as h:
        yield h


@pytest.fixture
async def space(host: Host) -> AsyncIterator[SpaceFixture]:
    yield await new_space(host)


@pytest.fixture
async def client(host: Host) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the session's Host."""
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as c:
        yield c
