"""Resources (host-api.md section 2): writes become commands, reads come from Postgres."""

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.core import commands as c
from sumi.core.problems import Problem
from sumi.gateway import _reads as reads
from sumi.gateway._auth import Caller, authorize
from sumi.gateway._backend import backend
from sumi.gateway._commands import Submission, submit
from sumi.gateway._json import fingerprint, idempotency_key, read_object, require
from sumi.gateway._query import decode_cursor, encode_cursor, int_param
from sumi.gateway._routing import route
from sumi.gateway._views import resource_json

CREATE_KEYS = ({"name", "form", "spec"}, {"privateInputs"})
UPDATE_KEYS = ({"spec"}, {"privateInputs"})
WITHHELD = "(withheld)"


def private_names(private: dict[str, Any] | None) -> dict[str, Any] | None:
    """privateInputs as the command carries them: their names, never their values. The command
    topic is a log anyone reading the Host's topics sees, and no Form here takes a private input
    (the processor judges them by their names alone); a Form that does will need them sealed."""
    return None if private is None else dict.fromkeys(private, WITHHELD)


def check_body(body: dict[str, Any]) -> dict[str, Any]:
    """Top-level types; the spec's own shape is the Form's to judge (invalid_spec)."""
    for key in ("name", "form"):
        require(key not in body or isinstance(body[key], str), f"{key} must be a string")
    for key in ("spec", "privateInputs"):
        require(key not in body or isinstance(body[key], dict), f"{key} must be an object")
    return body


async def _write(
    request: Request, body: dict[str, Any] | None, command: c.Command, caller: Caller, key: str
) -> Response:
    space = request.path_params["space"]
    # The key is bound to method, path and body: the processor compares fingerprints (QC-46).
    bound = fingerprint(request.method, request.url.path, body)
    return await submit(request, caller, Submission(command, space, space, key, bound))


async def _write_access(request: Request) -> tuple[Caller, str]:
    caller = await authorize(request, request.path_params["space"], write=True)
    key = idempotency_key(request.headers.get("idempotency-key"), required=True)
    assert key is not None
    return caller, key


async def create_resource(request: Request) -> Response:
    caller, key = await _write_access(request)
    body = check_body(await read_object(request, *CREATE_KEYS))
    command = c.ResourceCreate(
        name=body["name"], form=body["form"], spec=body["spec"], private_inputs=private_names(body.get("privateInputs"))
    )
    return await _write(request, body, command, caller, key)


async def update_resource(request: Request) -> Response:
    caller, key = await _write_access(request)
    body = check_body(await read_object(request, *UPDATE_KEYS))
    command = c.ResourceUpdate(
        ref=request.path_params["uid"], spec=body["spec"], private_inputs=private_names(body.get("privateInputs"))
    )
    return await _write(request, body, command, caller, key)


async def delete_resource(request: Request) -> Response:
    caller, key = await _write_access(request)
    return await _write(request, None, c.ResourceDelete(ref=request.path_params["uid"]), caller, key)


async def get_resource(request: Request) -> Response:
    space, ref = request.path_params["space"], request.path_params["uid"]
    await authorize(request, space)
    row = await reads.resource(backend(request), space, ref)
    if row is None:
        raise Problem("not_found", f"no Resource {ref!r} in Space {space!r}")
    return JSONResponse(resource_json(row))


async def list_resources(request: Request) -> Response:
    space = request.path_params["space"]
    await authorize(request, space)
    limit = int_param(request, "limit", 100, 1, 100)
    cursor = request.query_params.get("cursor")
    rows = await reads.resources(
        backend(request),
        space,
        form=request.query_params.get("form"),
        name=request.query_params.get("name"),
        after=decode_cursor(cursor) if cursor else None,
        limit=limit + 1,
    )
    more = len(rows) > limit
    items = [resource_json(r) for r in rows[:limit]]
    return JSONResponse({"items": items, "nextCursor": encode_cursor(items[-1]["uid"]) if more else None})


routes = [
    route("/v2/spaces/{space}/resources", POST=create_resource, GET=list_resources),
    route("/v2/spaces/{space}/resources/{uid}", GET=get_resource, PUT=update_resource, DELETE=delete_resource),
]
