"""The gateway's admission bound (issue 20 item 4): past it a request is turned away at once with
503 and Retry-After; every 429/503 carries Retry-After; the probes are never turned away."""

import asyncio
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

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


def writes_app(**kw: object) -> Starlette:
    routes = [
        Route("/v2/spaces/{space}/workflows/{uid}/instances", slow, methods=["POST", "GET"]),
        Route("/v2/spaces/{space}/workflows/{uid}/instances/{id}", slow, methods=["GET"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Admission, **kw)])


async def test_a_write_is_answered_within_its_bound_whatever_it_waits_on() -> None:
    # WF-27: a write that cannot be answered in time is backend_unavailable, in time, with Retry-After.
    release.clear()
    transport = httpx.ASGITransport(app=writes_app(answer_within=0.3))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        t0 = asyncio.get_running_loop().time()
        late = await asyncio.wait_for(client.post("/v2/spaces/s/workflows/w/instances", json={}), 5)
        assert asyncio.get_running_loop().time() - t0 < 1.0
        assert_problem(late, 503, "backend_unavailable")
        assert late.headers["retry-after"] == "1"
        held = asyncio.create_task(client.get("/v2/spaces/s/workflows/w/instances/i"))
        await asyncio.sleep(0.5)
        assert not held.done()  # a read (a long poll, a log's stream) is not cut
        release.set()
        assert (await held).status_code == 200


async def test_a_write_past_the_hosts_limit_is_refused_at_once_and_reads_still_pass() -> None:
    # WF-27: past capacity a create is refused in milliseconds, creating nothing; reads still answered.
    release.clear()
    admission: list[Admission] = []

    class Kept(Admission):
        def __init__(self, app: ASGIApp, **kw: Any) -> None:
            super().__init__(app, **kw)
            admission.append(self)

    app = Starlette(
        routes=[Route("/v2/spaces/{space}/workflows/{uid}/instances", slow, methods=["POST", "GET"])],
        middleware=[Middleware(Kept)],
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        held = [asyncio.create_task(client.post("/v2/spaces/s/workflows/w/instances", json={})) for _ in range(3)]
        await asyncio.sleep(0.1)
        admission[0].writes["workflows"].limit = 3  # as learnt from slow answers
        t0 = asyncio.get_running_loop().time()
        refused = await client.post("/v2/spaces/s/workflows/w/instances", json={})
        assert asyncio.get_running_loop().time() - t0 < 0.5
        assert_problem(refused, 503, "backend_unavailable")
        assert int(refused.headers["retry-after"]) >= 1
        read = asyncio.create_task(client.get("/v2/spaces/s/workflows/w/instances"))
        other = asyncio.create_task(client.post("/v2/spaces/t/workflows/w/instances", json={}))
        await asyncio.sleep(0.1)
        release.set()
        assert [r.status_code for r in await asyncio.gather(*held, read, other)] == [200] * 5
