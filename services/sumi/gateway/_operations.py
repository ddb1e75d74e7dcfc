"""Operations (host-api.md section 3), with `?wait=N` long-polling."""

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.core.problems import Problem
from sumi.gateway import _reads as reads
from sumi.gateway._auth import authenticate
from sumi.gateway._backend import Backend, Row, backend
from sumi.gateway._poll import poll
from sumi.gateway._query import int_param
from sumi.gateway._routing import route
from sumi.gateway._views import UNFINISHED, operation_json

MAX_WAIT = 60


async def _finished(db: Backend, operation_id: str) -> Row | None:
    row = await reads.operation(db, operation_id)
    return row if row is not None and row["state"] not in UNFINISHED else None


async def get_operation(request: Request) -> Response:
    caller = await authenticate(request)
    # More than the cap is held to the cap rather than refused ("at most 60").
    wait = min(int_param(request, "wait", 0, 0, 86_400), MAX_WAIT)
    db, operation_id = backend(request), request.path_params["id"]
    row = await reads.operation(db, operation_id)
    # Visible only with a role in its Space: otherwise it does not exist for the caller.
    if row is None or caller.role(row["space"]) is None:
        raise Problem("not_found", f"no Operation {operation_id!r} visible to this token")
    if wait and row["state"] in UNFINISHED:
        finished = await poll(lambda: _finished(db, operation_id), wait, 0.05, 0.2)
        row = finished or await reads.operation(db, operation_id) or row
    return JSONResponse(operation_json(row))


routes = [route("/v2/operations/{id}", GET=get_operation)]
