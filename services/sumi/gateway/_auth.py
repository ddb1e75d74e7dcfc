"""Who is calling, and what they may do in a Space (host-api.md section 1).

Looked up on every request, through `_lookups`: kept until the control projection
says tokens, grants or Spaces changed, so a revocation is effective on the next
request this gateway answers after it (docs/decisions.md).
"""

import hashlib
from dataclasses import dataclass, field

from starlette.requests import Request

from sumi.core.problems import Problem
from sumi.gateway import _reads as reads
from sumi.gateway._backend import backend


@dataclass(frozen=True)
class Caller:
    principal: str
    admin: bool
    roles: dict[str, str] = field(default_factory=dict)

    def role(self, space: str) -> str | None:
        """viewer | editor | None; an admin is editor everywhere."""
        return "editor" if self.admin else self.roles.get(space)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bearer(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


async def authenticate(request: Request) -> Caller:
    return (await _caller(request, ""))[0]


async def _caller(request: Request, space: str) -> tuple[Caller, bool]:
    """The caller, and whether `space` exists: one query."""
    token = bearer(request.headers.get("authorization"))
    if token is None:
        raise Problem("unauthenticated", "missing bearer token")
    row = await reads.caller(backend(request), token_hash(token), space)
    if row is None:
        raise Problem("unauthenticated", "unknown or revoked token")
    roles = dict(zip(row["spaces"], row["roles"], strict=True))
    return Caller(row["principal"], row["admin"], roles), row["space_exists"]


def require_admin(caller: Caller) -> None:
    if not caller.admin:
        raise Problem("forbidden", "this needs an admin token")


async def authorize(request: Request, space: str, write: bool = False) -> Caller:
    """Authenticate, then check the caller's role in `space`.

    No role (or no such Space) is `404 not_found`, so a Space's existence is
    never revealed; a viewer that writes is `403 forbidden`.
    """
    caller, exists = await _caller(request, space)
    role = caller.role(space)
    if role is None or not exists:
        raise Problem("not_found", f"no Space {space!r} visible to this token")
    if write and role != "editor":
        raise Problem("forbidden", f"role {role} may not change Space {space!r}")
    return caller
