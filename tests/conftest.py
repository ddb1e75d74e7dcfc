"""Session fixtures: one real Kafka broker and one real PostgreSQL for the whole run.

Each comes from, in order: the SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL
variables (external ones); testcontainers (`apache/kafka`, `postgres`) when a
Docker engine is reachable; else the local launchers `sumi up` uses. Tests
isolate by a topic prefix and database schema per Host and a Space per test.
"""

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import settings as hypothesis_settings

from sumi_projections import drop, migrate
from tests.hostkit import Host, SpaceFixture, new_settings, new_space, replicas_beside, running_host

# Properties, not timings: a loaded 2-core CI machine must not fail a test by its clock.
hypothesis_settings.register_profile("sumi", deadline=None)
hypothesis_settings.load_profile("sumi")


@pytest.fixture(scope="session")
def kafka_bootstrap(sumi_kafka_bootstrap: str) -> str:
    """The test kit's broker (sumi.testing): one for this suite and the examples' tests alike."""
    return sumi_kafka_bootstrap


@pytest.fixture(scope="session")
def database_url(sumi_database_url: str) -> str:
    return sumi_database_url


@pytest.fixture(scope="session")
def replica_count() -> int:
    """SUMI_TEST_REPLICAS=2: the session's Hosts run two replicas of every scalable processor, as
    the black-box suites' Host does (issue 42); unset, one."""
    return int(os.environ.get("SUMI_TEST_REPLICAS", "1"))


@pytest.fixture(scope="session")
def host(kafka_bootstrap: str, database_url: str, replica_count: int) -> Iterator[Host]:
    with running_host(new_settings(kafka_bootstrap, database_url)) as h, replicas_beside(h, replica_count):
        yield h


@pytest.fixture(scope="session")
def sumi_host(host: Host) -> Host:
    """The test kit's Host (sumi.testing) is this suite's one session Host: one start, not two."""
    return host


@pytest.fixture
async def space(host: Host) -> AsyncIterator[SpaceFixture]:
    yield await new_space(host)


@pytest.fixture
async def client(host: Host) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on the session's Host."""
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as c:
        yield c


@pytest.fixture
async def cur(database_url: str) -> AsyncIterator[psycopg.AsyncCursor[Any]]:
    """A cursor on a fresh schema of the read models, migrated, dropped after the test."""
    schema = "rm" + uuid.uuid4().hex[:8]
    migrate(database_url, schema)
    try:
        async with await psycopg.AsyncConnection.connect(
            database_url, autocommit=True, options=f"-c search_path={schema}"
        ) as conn:
            async with conn.cursor() as c:
                yield c
    finally:
        drop(database_url, schema)
