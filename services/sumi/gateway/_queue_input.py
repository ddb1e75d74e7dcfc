"""The queue send body and its message IDs (host-api.md section 4; QC-52).

No I/O of its own, yet not a pure module: importing it loads the gateway package, and with it
the HTTP app (tests/unit/test_pure_modules.py would see starlette).
"""

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any

from sumi.core.ids import message_id, new_ulid
from sumi.core.problems import Problem
from sumi.gateway._json import check_object, is_int, require

MAX_MESSAGES = 100
MAX_BODY = 127_000
MAX_DELAY = 43_200


@dataclass(frozen=True)
class Outgoing:
    body: bytes
    delay_seconds: int


def decode_body(value: Any, index: int) -> bytes:
    """Standard base64 with padding; anything else (URL-safe, unpadded, junk) is refused."""
    require(isinstance(value, str), f"messages[{index}].body must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Problem("invalid_request", f"messages[{index}].body is not standard padded base64") from None


def parse_message(item: Any, index: int) -> Outgoing:
    check_object(item, {"body"}, {"delaySeconds"})
    delay = item.get("delaySeconds", 0)
    require(
        is_int(delay) and 0 <= delay <= MAX_DELAY, f"messages[{index}].delaySeconds must be an integer 0..{MAX_DELAY}"
    )
    body = decode_body(item["body"], index)
    if len(body) > MAX_BODY:
        raise Problem("message_too_large", f"messages[{index}].body is {len(body)} bytes; the limit is {MAX_BODY}")
    return Outgoing(body, delay)


def parse_messages(body: dict[str, Any]) -> list[Outgoing]:
    check_object(body, {"messages"})
    items = body["messages"]
    require(
        isinstance(items, list) and 1 <= len(items) <= MAX_MESSAGES,
        f"messages must be an array of 1..{MAX_MESSAGES} messages",
    )
    return [parse_message(item, i) for i, item in enumerate(items)]


def message_ids(queue_uid: str, principal: str, key: str | None, count: int) -> list[str]:
    """Fresh IDs without a key; with one, IDs derived from it so a replay finds its messages.

    Fields are joined by newlines, which none of them can contain (names and keys
    are visible ASCII), so different inputs cannot collide by concatenation.
    """
    if key is None:
        return [message_id(new_ulid()) for _ in range(count)]
    return [
        message_id(hashlib.sha256(f"{queue_uid}\n{principal}\n{key}\n{i}".encode()).hexdigest()[:26])
        for i in range(count)
    ]
