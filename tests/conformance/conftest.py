"""Fixtures of the conformance suite."""

from collections.abc import Iterator

import httpx
import pytest

from tests.conformance.kit import Api
from tests.conformance.modes import ALWAYS_REPLAY
from tests.hostkit import Host, SpaceFixture, new_settings, replicas_beside, running_host


@pytest.fixture
async def api(client: httpx.AsyncClient, space: SpaceFixture) -> Api:
    """The public HTTP API of a fresh Space, as its editor."""
    return Api(client, space)


@pytest.fixture(scope="package")
def always_replay_host(kafka_bootstrap: str, database_url: str, replica_count: int) -> Iterator[Host]:
    """A second Host whose workflow engine runs in always-replay mode (see modes.py), every
    replica of it."""
    settings = new_settings(kafka_bootstrap, database_url)
    with running_host(settings, env=ALWAYS_REPLAY) as h, replicas_beside(h, replica_count, env=ALWAYS_REPLAY):
        yield h
