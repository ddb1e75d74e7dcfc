"""Tokens (host-api.md section 1). The gateway mints the secret; only its hash is logged."""

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.control.rules.forms import NAME_RE
from sumi.core import commands as c
from sumi.core.problems import Problem
from sumi.core.times import rfc3339
from sumi.gateway import _reads as reads
from sumi.gateway._auth import authenticate, require_admin, token_hash
from sumi.gateway._backend import backend
from sumi.gateway._commands import Submission, decide, respond, submit
from sumi.gateway._json import check_object, read_object, require
from sumi.gateway._routing import route
from sumi.gateway._spaces import check_name
from sumi.wire.topics import ADMIN_KEY

ROLES: dict[str, c.Role] = {"viewer": "viewer", "editor": "editor"}


def new_token() -> str:
    return "sumi_" + secrets.token_urlsafe(32)


def check_grants(value: Any) -> tuple[c.Grant, ...]:
    """Shape only; whether each Space exists is the processor's decision."""
    require(isinstance(value, list), "grants must be an array")
    grants = []
    for grant in value:
        check_object(grant, {"space", "role"})
        require(isinstance(grant["role"], str) and grant["role"] in ROLES, "a grant's role must be viewer or editor")
        grants.append(c.Grant(check_name(grant["space"], "a grant's space"), ROLES[grant["role"]]))
    return tuple(grants)


async def create_token(request: Request) -> Response:
    caller = await authenticate(request)
    require_admin(caller)
    body = await read_object(request, {"principal"}, {"grants", "admin"})
    principal = check_name(body["principal"], "principal")
    grants = check_grants(body.get("grants", []))
    require(isinstance(body.get("admin", False), bool), "admin must be a boolean")
    token = new_token()
    command = c.TokenCreate(
        principal=principal,
        grants=grants,
        admin=body.get("admin", False),
        token_hash=token_hash(token),
    )
    decision = await decide(request, caller, Submission(command, "", ADMIN_KEY))
    if not decision.accepted:
        return await respond(request, decision)
    return JSONResponse({"token": token, "principal": principal}, status_code=201)


async def list_principals(request: Request) -> Response:
    caller = await authenticate(request)
    require_admin(caller)
    rows = await reads.principals(backend(request))
    items = [
        {
            "principal": r["principal"],
            "admin": r["admin"],
            "tokens": r["tokens"],
            "lastIssuedAt": rfc3339(r["last_issued_at"]),
            "grants": r["grants"],
        }
        for r in rows
    ]
    return JSONResponse({"items": items})


async def revoke_tokens(request: Request) -> Response:
    caller = await authenticate(request)
    require_admin(caller)
    principal = request.path_params["principal"]
    if not NAME_RE.match(principal):
        # No principal can have this name, so none of its tokens exist: not a revocation of nothing.
        raise Problem("not_found", "no such principal")
    return await submit(request, caller, Submission(c.TokenRevoke(principal=principal), "", ADMIN_KEY))


routes = [
    route("/v2/tokens", POST=create_token, GET=list_principals),
    route("/v2/tokens/{principal}", DELETE=revoke_tokens),
]
