"""Fixtures of the QueueConsumer conformance suite."""

import httpx
import pytest

from tests.conformance.kit import Api
from tests.hostkit import SpaceFixture


@pytest.fixture
async def api(client: httpx.AsyncClient, space: SpaceFixture) -> Api:
    """The public HTTP API of a fresh Space, as its editor."""
    return Api(client, space)
