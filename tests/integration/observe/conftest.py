"""Fixtures of the observability tests: a fresh Space's public API, as in the conformance suite."""

import httpx
import pytest

from tests.conformance.kit import Api
from tests.hostkit import SpaceFixture


@pytest.fixture
async def api(client: httpx.AsyncClient, space: SpaceFixture) -> Api:
    return Api(client, space)
