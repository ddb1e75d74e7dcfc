"""Instance IDs in paths and list cursors of the workflow data plane (host-api.md section 5)."""

from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.core.problems import Problem
from sumi.gateway._problems import on_problem
from sumi.gateway._routing import route
from sumi.gateway._workflows import BASE, InstancePaths, decode_cursor, encode_cursor, instance_id

# Any Unicode scalar value: no lone surrogates (they are no text, WF-19).
IDS = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=256)


async def echo(request: Request) -> Response:
    return JSONResponse({"id": instance_id(request), "uid": request.path_params["uid"]})


def app() -> Starlette:
    # The real middleware and route templates, with endpoints that echo what they were given.
    routes = [route(BASE + "/{id}", GET=echo), route(BASE + "/{id}/history", GET=echo)]
    return Starlette(routes=routes, middleware=[], exception_handlers={Problem: on_problem})


async def get(path: str) -> httpx.Response:
    asgi = InstancePaths(app())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url="http://gw") as c:
        return await c.get(path)


@given(IDS)
async def test_any_instance_id_round_trips_through_the_path(iid: str) -> None:  # WF-19
    # A client encodes the dots too: a segment "." or ".." is a dot-segment that HTTP clients
    # (httpx included) remove before sending (RFC 3986, 5.2.4), and "%2E" is the same ID.
    segment = quote(iid, safe="").replace(".", "%2E")
    for tail in ("", "/history"):
        r = await get(f"/v2/spaces/s/workflows/wf/instances/{segment}{tail}")
        assert r.status_code == 200, (iid, r.text)
        assert r.json() == {"id": iid, "uid": "wf"}


@pytest.mark.parametrize("raw", ["%ED%A0%80", "%FF", "x" * 257, quote("é" * 257)])
async def test_ids_that_are_no_ids_are_invalid_request(raw: str) -> None:  # WF-19
    r = await get(f"/v2/spaces/s/workflows/wf/instances/{raw}")
    assert r.status_code == 400 and r.json()["code"] == "invalid_request"


@given(IDS)
def test_cursor_round_trip(last: str) -> None:
    assert decode_cursor(encode_cursor(last)) == last


@pytest.mark.parametrize("bad", ["", "zz", "i0", "ixyz", "iff", "res_x"])
def test_foreign_cursors_are_invalid_request(bad: Any) -> None:
    with pytest.raises(Problem) as caught:
        decode_cursor(bad)
    assert caught.value.code == "invalid_request"
