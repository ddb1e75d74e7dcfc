"""The DurableWorkflow instance data plane (host-api.md section 5), the HTTP twin of the
Caller Binding (WF-18..27).

Writes (create, events, terminate) are typed workflow commands appended to
`<prefix>.workflow.commands` under the instance key; the engine that owns the key
decides, and its `CommandDecided` comes back from the instance log as soon as the engine's
transaction commits (`_logdecisions`; the `decisions` table where the log cannot give it).
Reads come from the workflow read models; a read of an instance written through this gateway,
or with the `Sumi-Position` its write's answer gave, first waits for the projection to have
applied that write (`_positions`).

- Instance IDs may hold any Unicode scalar values, "/" included, percent-encoded in
  the path. `InstancePaths` routes on the raw path: every segment is decoded on its
  own, and an encoded "/" stays encoded for routing; handlers take the ID from the
  decoded segments, never from the routed path.
- An Idempotency-Key (optional here) fixes the command ID: a digest of (Space,
  principal, key) and of the request's fingerprint. A retry therefore re-sends the
  same command ID, and the `decisions` table keeps the first decision of an ID, so
  the retry gets the first answer and nothing new happens. Before appending, a retry
  looks that answer up by the key's prefix; the key with another request is 422.
  Without an ID in the body, the key also fixes the issued instance ID.
"""

import hashlib
import time
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from sumi.control.rules.forms.durable_workflow import STATUSES
from sumi.core.ids import new_ulid
from sumi.core.problems import Problem
from sumi.core.times import rfc3339
from sumi.gateway import _positions as positions
from sumi.gateway import _reads as reads
from sumi.gateway._auth import Caller, authorize
from sumi.gateway._backend import Row, backend
from sumi.gateway._commands import Earlier, request_reply, respond
from sumi.gateway._json import DocumentResponse, check_object, fingerprint, idempotency_key, parse_json, read_body
from sumi.gateway._query import choice_param, int_param
from sumi.gateway._readafter import read_after
from sumi.gateway._routing import route
from sumi.wire.topics import instance_key
from sumi.workflow import MAX_DOCUMENT_BYTES, is_name
from sumi.workflow.commands import (
    UNSET,
    CreateInstance,
    SendEvent,
    TerminateInstance,
    WorkflowCommand,
    key_of,
    submitted,
)

BASE = "/v2/spaces/{space}/workflows/{uid}/instances"
ID_SEGMENT = 7  # "", "v2", "spaces", space, "workflows", uid, "instances", id, ...
SEGMENTS = "sumi.segments"  # the scope key of the decoded raw segments


class InstancePaths:
    """Routes instance paths on their raw segments, so an ID holding "/" stays one segment."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw and raw.startswith(b"/v2/spaces/") and b"/workflows/" in raw:
            try:
                segments = [unquote_to_bytes(s).decode("utf-8") for s in raw.split(b"/")]
            except UnicodeDecodeError:
                segments = None  # the handler answers 400: an ID is Unicode scalar values
            if segments is not None:
                scope["path"] = "/".join(s.replace("/", "%2F") for s in segments)
            scope[SEGMENTS] = segments
        await self.app(scope, receive, send)


def instance_id(request: Request) -> str:
    segments = request.scope.get(SEGMENTS)
    value = segments[ID_SEGMENT] if segments and len(segments) > ID_SEGMENT else None
    if not isinstance(value, str) or not is_name(value):
        raise Problem("invalid_request", "an instance ID is 1..256 Unicode scalar values, percent-encoded in the path")
    return value


async def workflow_uid(request: Request, write: bool) -> tuple[Caller, str]:
    """The caller and the DurableWorkflow's UID; a deleted Workflow is `not_found`."""
    space, ref = request.path_params["space"], request.path_params["uid"]
    caller = await authorize(request, space, write=write)
    row = await reads.workflow(backend(request), space, ref)
    if row is None:
        raise Problem("not_found", f"no DurableWorkflow {ref!r} in Space {space!r}")
    return caller, str(row["uid"])


# A body carries at most one document of 1 MiB canonical (DOC-1); written with every
# character escaped (\uXXXX, six bytes for one) it still fits. A larger body is refused
# while it is read, never parsed and walked whole.
MAX_BODY_BYTES = 8 * MAX_DOCUMENT_BYTES


async def _body(request: Request, required: set[str], optional: set[str], empty_ok: bool = False) -> dict[str, Any]:
    raw = await read_body(request, MAX_BODY_BYTES, "document_too_large")
    if empty_ok and not raw.strip():
        return {}
    return check_object(parse_json(raw, too_deep="invalid_params"), required, optional)


def _name(value: Any, what: str) -> str:
    if not is_name(value):
        raise Problem("invalid_request", f"{what} must be a string of 1..256 Unicode scalar values")
    return str(value)


# ---- writes ------------------------------------------------------------------------------------


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


async def _command(request: Request, caller: Caller, command: WorkflowCommand, body: Any, key: str | None) -> Response:
    db = backend(request)
    space = request.path_params["space"]
    bound = fingerprint(request.method, request.url.path, body)
    earlier: Earlier | None = None
    if key is None:
        command_id = new_ulid()
    else:
        prefix = f"wfc_{_digest(space, caller.principal, key)}_"
        command_id = prefix + _digest(bound)

        async def first_under_key() -> Row | None:
            # The first decision under this key is this command's own (a retry) or another's.
            first = await reads.first_decision(db, prefix)
            if first is not None and first["command_id"] != command_id:
                raise Problem("idempotency_key_reused", "this Idempotency-Key was used with another request")
            return first

        earlier = first_under_key

    record = submitted(
        command,
        command_id=command_id,
        space=space,
        principal=caller.principal,
        now=int(time.time() * 1000),
        admin=caller.admin,
        idempotency_key=key,
        fingerprint=bound,
    )
    decision = await request_reply(db, "workflow.commands", key_of(command), record, earlier)
    response = await respond(request, decision)
    if decision.position is not None:
        db.positions.note(key_of(command), decision.position)
        db.positions.note(command.workflow_uid, decision.position)  # for the list of its instances
        response.headers.update(positions.header(decision.position))
    return response


async def create_instance(request: Request) -> Response:
    caller, uid = await workflow_uid(request, write=True)
    key = idempotency_key(request.headers.get("idempotency-key"), required=False)
    body = await _body(request, set(), {"id", "params"})
    params = body.get("params", UNSET)  # the command checks it (DOC-1..6); null is no document
    if "id" in body:
        command = CreateInstance(uid, _name(body["id"], "id"), params)
    elif key is not None:  # a retry issues the same ID (WF-19: a lost answer is no second run)
        command = CreateInstance(
            uid, f"wfi_{_digest(request.path_params['space'], caller.principal, key)}", params, True
        )
    else:
        command = CreateInstance.new(uid, None, params)
    return await _command(request, caller, command, body, key)


async def send_event(request: Request) -> Response:
    caller, uid = await workflow_uid(request, write=True)
    iid = instance_id(request)
    key = idempotency_key(request.headers.get("idempotency-key"), required=False)
    body = await _body(request, {"type"}, {"payload"})
    event_type = _name(body["type"], "type")
    event = SendEvent(uid, iid, event_type, body.get("payload", UNSET))  # the command checks the document
    return await _command(request, caller, event, body, key)


async def terminate_instance(request: Request) -> Response:
    caller, uid = await workflow_uid(request, write=True)
    iid = instance_id(request)
    key = idempotency_key(request.headers.get("idempotency-key"), required=False)
    body = await _body(request, set(), set(), empty_ok=True)
    return await _command(request, caller, TerminateInstance(uid, iid), body or None, key)


# ---- reads -------------------------------------------------------------------------------------


async def get_instance(request: Request) -> Response:
    _, uid = await workflow_uid(request, write=False)
    iid = instance_id(request)
    await read_after(request, backend(request), instance_key(uid, iid))
    row = await reads.instance(backend(request), uid, iid)
    if row is None:
        raise Problem("unknown_instance", f"no instance {iid!r} of this Workflow")  # WF-20
    return DocumentResponse(instance_json(row))


def instance_json(row: Row) -> dict[str, Any]:
    """WF-21: `output` only when complete, `error` only when errored."""
    body: dict[str, Any] = {"id": row["instance_id"], "status": row["status"]}
    if row["status"] == "complete" and row["output"] is not None:
        body["output"] = row["output"]
    if row["status"] == "errored":
        error = {"reason": row["error_reason"]}
        if row["error_message"] is not None:
            error["message"] = row["error_message"]
        body["error"] = error
    return body


async def list_instances(request: Request) -> Response:
    _, uid = await workflow_uid(request, write=False)
    status = choice_param(request, "status", STATUSES)
    limit = int_param(request, "limit", 100, 1, 100)
    cursor = request.query_params.get("cursor")
    after = decode_cursor(cursor) if cursor else None
    await read_after(request, backend(request), uid)
    rows = await reads.instances(backend(request), uid, status, after, limit + 1)
    items = [
        {
            "id": r["instance_id"],
            "status": r["status"],
            "createdAt": rfc3339(r["created_at"]),
            "updatedAt": rfc3339(r["updated_at"]),
        }
        for r in rows[:limit]
    ]
    more = len(rows) > limit
    return JSONResponse({"items": items, "nextCursor": encode_cursor(items[-1]["id"]) if more else None})


async def instance_history(request: Request) -> Response:
    _, uid = await workflow_uid(request, write=False)
    iid = instance_id(request)
    await read_after(request, backend(request), instance_key(uid, iid))
    rows = await reads.history(backend(request), uid, iid)
    if not rows:  # an instance's history starts with its InstanceCreated
        raise Problem("unknown_instance", f"no instance {iid!r} of this Workflow")
    items = [{"seq": r["seq"], "type": r["type"], "at": rfc3339(r["at"]), "data": r["data"]} for r in rows]
    return DocumentResponse({"items": items})


def encode_cursor(last_id: str) -> str:
    """Opaque to clients: the last instance ID of a page (paging is stable under inserts)."""
    return "i" + last_id.encode("utf-8").hex()


def decode_cursor(cursor: str) -> str:
    try:
        last = bytes.fromhex(cursor[1:]).decode("utf-8") if cursor.startswith("i") else ""
        if not last:
            raise ValueError(cursor)
        return last
    except (ValueError, UnicodeDecodeError):
        raise Problem("invalid_request", "cursor is not one this Host issued") from None


routes = [
    route(BASE, POST=create_instance, GET=list_instances),
    route(BASE + "/{id}", GET=get_instance),
    route(BASE + "/{id}/events", POST=send_event),
    route(BASE + "/{id}/terminate", POST=terminate_instance),
    route(BASE + "/{id}/history", GET=instance_history),
]
