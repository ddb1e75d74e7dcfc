"""Spaces (host-api.md section 1): create and delete by admins, list by anyone."""

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.control.rules.forms import NAME_PATTERN, NAME_RE
from sumi.core import commands as c
from sumi.core.problems import Problem
from sumi.core.times import rfc3339
from sumi.gateway import _reads as reads
from sumi.gateway._auth import authenticate, authorize, require_admin
from sumi.gateway._backend import backend
from sumi.gateway._commands import Submission, submit
from sumi.gateway._json import read_object, require
from sumi.gateway._routing import route


def check_name(value: object, what: str) -> str:
    require(isinstance(value, str), f"{what} must be a string")
    if not NAME_RE.match(str(value)):
        raise Problem("invalid_request", f"{what} must match {NAME_PATTERN}")
    return str(value)


async def create_space(request: Request) -> Response:
    caller = await authenticate(request)
    require_admin(caller)
    body = await read_object(request, {"name"})
    name = check_name(body["name"], "name")
    return await submit(request, caller, Submission(c.SpaceCreate(name=name), name, name))


async def list_spaces(request: Request) -> Response:
    caller = await authenticate(request)
    rows = await reads.spaces(backend(request), None if caller.admin else caller.principal)
    items = [{"name": r["name"], "role": r["role"], "createdAt": rfc3339(r["created_at"])} for r in rows]
    return JSONResponse({"items": items})


async def delete_space(request: Request) -> Response:
    name = request.path_params["space"]
    # Visibility first: without a role the Space is 404, with a role but not admin 403.
    caller = await authorize(request, name)
    require_admin(caller)
    return await submit(request, caller, Submission(c.SpaceDelete(name=name), name, name))


routes = [
    route("/v2/spaces", POST=create_space, GET=list_spaces),
    route("/v2/spaces/{space}", DELETE=delete_space),
]
