"""The gateway's admission bound (issue 20 item 4): past it a request is turned away at once with
503 and Retry-After; every 429/503 carries Retry-After; the probes are never turned away."""

import asyncio

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from sumi.gateway._admission import Admission
from tests.httpkit import assert_problem

release = asyncio.Event()


async def slow(request: Request) -> Response:
    await release.wait()
    return JSONResponse({})


async def full(request: Request) -> Response:
    return JSONResponse({"code": "event_queue_full"}, status_code=429)


def app(limit: int) -> Starlette:
    routes = [Route("/v2/slow", slow), Route("/v2/full", full), Route("/healthz", slow)]
    return Starlette(routes=routes, middleware=[Middleware(Admission, limit=limit)])


async def test_past_the_bound_a_request_is_answered_503_with_retry_after_at_once() -> None:
    # WF-27: backend_unavailable means retry with the same Idempotency-Key; Retry-After says when.
    release.clear()
    transport = httpx.ASGITransport(app=app(2))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        held = [asyncio.create_task(client.get("/v2/slow")) for _ in range(2)]
        await asyncio.sleep(0.1)
        turned = await asyncio.wait_for(client.get("/v2/slow"), 5)
        assert_problem(turned, 503, "backend_unavailable")
        assert turned.headers["retry-after"] == "1"
        probe = asyncio.create_task(client.get("/healthz"))  # over the bound, and still let in
        await asyncio.sleep(0.1)
        release.set()
        assert [r.status_code for r in await asyncio.gather(*held, probe)] == [200, 200, 200]
        assert (await client.get("/v2/slow")).status_code == 200  # the bound is free again


async def test_every_429_carries_retry_after() -> None:
    # WF-24: event_queue_full is a bound reached; the client is told when to come back.
    transport = httpx.ASGITransport(app=app(2))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        r = await client.get("/v2/full")
    assert r.status_code == 429 and r.headers["retry-after"] == "1"
