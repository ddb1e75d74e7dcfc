"""Frame codec of the runtime protocol: 4-byte big-endian length + UTF-8 JSON."""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

MAX_FRAME = 64 * 1024 * 1024
_HEAD = struct.Struct(">I")


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return _HEAD.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """Next frame, or None at a clean end of stream."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    (size,) = _HEAD.unpack(head)
    if size > MAX_FRAME:
        raise ValueError(f"frame of {size} bytes exceeds {MAX_FRAME}")
    frame = json.loads(await reader.readexactly(size))
    if not isinstance(frame, dict):
        raise ValueError("frame is not a JSON object")
    return frame
