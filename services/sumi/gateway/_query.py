"""Query-string parameters and paging cursors. Bad values are `400 invalid_request`."""

import base64
import binascii

from starlette.requests import Request

from sumi.core.problems import Problem


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    return parse_int(name, raw, low, high)


def parse_int(name: str, raw: str, low: int, high: int) -> int:
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise Problem("invalid_request", f"{name} must be an integer {low}..{high}")
    return int(raw)


def bool_param(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw not in ("true", "false"):
        raise Problem("invalid_request", f"{name} must be true or false")
    return raw == "true"


def choice_param(request: Request, name: str, allowed: tuple[str, ...]) -> str | None:
    raw = request.query_params.get(name)
    if raw is not None and raw not in allowed:
        raise Problem("invalid_request", f"{name} must be one of {', '.join(allowed)}")
    return raw


def encode_cursor(uid: str) -> str:
    """Opaque to clients: the last UID of a page, so paging is stable under inserts."""
    return base64.urlsafe_b64encode(uid.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        uid = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise Problem("invalid_request", "cursor is not one this Host issued") from None
    if not uid or "_" not in uid:
        raise Problem("invalid_request", "cursor is not one this Host issued")
    return uid
