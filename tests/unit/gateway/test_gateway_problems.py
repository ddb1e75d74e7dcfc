"""Every answer is a Problem, even without a backend (host-api.md section 6). No Kafka, no Postgres:
the app is called without its lifespan, so anything touching the backend fails unexpectedly."""

import logging

import httpx
import psycopg
import pytest
from aiokafka.errors import KafkaConnectionError

from sumi.core.config import Settings
from sumi.gateway import create_app
from sumi.gateway._problems import unexpected_response

PROBLEM = "application/problem+json"


@pytest.fixture
async def client() -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(Settings.from_env()))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        yield c  # type: ignore[misc]


async def test_unknown_route_is_a_not_found_problem(client: httpx.AsyncClient) -> None:
    r = await client.get("/v2/nothing/here")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
    assert r.json()["code"] == "not_found" and r.json()["type"] == "urn:sumi:problem:not_found"


async def test_wrong_method_is_a_405_problem_listing_all(client: httpx.AsyncClient) -> None:
    r = await client.patch("/v2/spaces/s/resources/r")
    assert r.status_code == 405 and r.headers["content-type"] == PROBLEM
    assert r.json()["status"] == 405
    assert {m.strip() for m in r.headers["allow"].split(",")} >= {"GET", "PUT", "DELETE"}


async def test_missing_token_is_401_before_any_backend_call(client: httpx.AsyncClient) -> None:
    r = await client.get("/v2/spaces")
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"


async def test_an_unexpected_error_is_a_500_problem(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL, logger="sumi.gateway")  # the error is logged; keep it quiet
    r = await client.get("/v2/spaces", headers={"Authorization": "Bearer x"})  # backend not started
    assert r.status_code == 500 and r.headers["content-type"] == PROBLEM
    assert r.json()["status"] == 500 and "Traceback" not in r.text


@pytest.mark.parametrize("exc", [psycopg.OperationalError("down"), KafkaConnectionError("down"), TimeoutError()])
def test_connectivity_errors_are_503_backend_unavailable(exc: Exception) -> None:
    response = unexpected_response(exc, "/x")
    assert response.status_code == 503 and b'"backend_unavailable"' in response.body


async def test_service_endpoints_need_no_token(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/openapi.json")).status_code == 200
    assert (await client.get("/ui/")).status_code == 200
    assert (await client.get("/metrics")).status_code == 401
