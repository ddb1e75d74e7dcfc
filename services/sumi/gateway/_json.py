"""Request bodies: strict JSON objects, canonical form, fingerprints, Idempotency-Key.

Pure functions (no I/O) except `read_object`, so the rules are unit-testable.
"""

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from sumi.core.canonical import canonical, json_int, parsed_canonical
from sumi.core.problems import Problem

# The largest request we read: 100 queue messages of 127,000 bytes in base64, with room.
MAX_BODY_BYTES = 20 * 1024 * 1024


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate object key")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes, too_deep: str = "invalid_request") -> Any:
    """RFC 8259 JSON only: no NaN/Infinity, no duplicate keys (they would be ambiguous).

    Numbers are read as JavaScript reads them (sumi.core.canonical.json_int): an integer
    beyond 2**53 is the nearest double. A body nested deeper than the parser's stack
    reaches is `too_deep` (the code of a document too deep where the body holds one): it
    is far deeper than any document may be (MAX_DEPTH)."""
    try:
        return json.loads(
            raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_int=json_int
        )
    except RecursionError:
        raise Problem(too_deep, "the body is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise Problem("invalid_request", f"the body is not valid JSON: {exc}") from None


def check_object(body: Any, required: Iterable[str], optional: Iterable[str] = ()) -> dict[str, Any]:
    """A JSON object with exactly the allowed keys (unknown keys are rejected, never ignored)."""
    if not isinstance(body, dict):
        raise Problem("invalid_request", "the body must be a JSON object")
    required = set(required)
    unknown = sorted(set(body) - required - set(optional))
    if unknown:
        raise Problem("invalid_request", f"unknown key(s): {', '.join(unknown)}")
    missing = sorted(required - set(body))
    if missing:
        raise Problem("invalid_request", f"missing key(s): {', '.join(missing)}")
    return body


def require(ok: bool, message: str) -> None:
    """A top-level type check; failing it is `400 invalid_request`."""
    if not ok:
        raise Problem("invalid_request", message)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES, code: str = "payload_too_large") -> bytes:
    """The body, refused with `code` as soon as it passes `limit` bytes (never read whole)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Problem(code, f"the body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise Problem(code, f"the body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_object(request: Request, required: Iterable[str], optional: Iterable[str] = ()) -> dict[str, Any]:
    return check_object(parse_json(await read_body(request)), required, optional)


def canonical_body(obj: Any) -> str:
    """A request body in the canonical form (sumi.core.canonical); one it cannot take is 400."""
    try:
        return canonical(obj)
    except ValueError as exc:
        raise Problem("invalid_request", f"the body cannot be canonicalized: {exc}") from None


def fingerprint(method: str, path: str, body: Any | None) -> str:
    """What an Idempotency-Key is bound to: method, path and canonical body ('' when none)."""
    text = "" if body is None else canonical_body(body)
    return hashlib.sha256(f"{method.upper()}\n{path}\n{text}".encode()).hexdigest()


def idempotency_key(value: str | None, required: bool) -> str | None:
    """1..255 visible ASCII characters; missing → 428 when required."""
    if value is None:
        if required:
            raise Problem("idempotency_key_required", "this request needs an Idempotency-Key")
        return None
    if not 1 <= len(value) <= 255 or any(not 0x21 <= ord(c) <= 0x7E for c in value):
        raise Problem("invalid_request", "Idempotency-Key must be 1..255 visible ASCII characters")
    return value


class DocumentResponse(JSONResponse):
    """A response holding documents, written in the canonical form like every other copy of them:
    Postgres gives numbers back as decimals (1e308 as 309 digits), the canonical form as doubles."""

    def render(self, content: Any) -> bytes:
        return parsed_canonical(content).encode("utf-8")  # rows' JSON, read back: str keys only
