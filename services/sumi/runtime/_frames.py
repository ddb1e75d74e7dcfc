"""Frame codec of the runtime protocol: 4-byte big-endian length + UTF-8 JSON."""

from __future__ import annotations

import asyncio
import json
import re
import struct
from typing import Any

from sumi.core.canonical import loads

from .rules._protocol import ProtocolError

MAX_FRAME = 64 * 1024 * 1024
_HEAD = struct.Struct(">I")
_SKIP_CHUNK = 1024 * 1024
# Both runtimes write a frame's contextId among its first fields (op, reqId, contextId, ...).
_CONTEXT = re.compile(rb'"contextId":"([^"\\]{1,128})"')
_HEAD_BYTES = 512


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return _HEAD.pack(len(body)) + body


# A frame this large the Host parses off its event loop: the loop serves every context of the
# runtime (and the engine's other work) while one context's ~1 MiB documents are read.
BIG_FRAME = 256 * 1024


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """Next frame, or None at a clean end of stream (the Python child: parsed on its loop, which
    serves its one context only).

    A frame that is too large or not a JSON object raises ProtocolError after
    its bytes were consumed, so the stream stays in step and the reader may go
    on; only a stream cut mid-frame (IncompleteReadError) ends the channel.
    """
    body = await _read_body(reader)
    return None if body is None else _parse(body)


async def read_sized_frame(reader: asyncio.StreamReader) -> tuple[dict[str, Any], int] | None:
    """The Host's `read_frame`: the frame and its size in bytes, a large one parsed in a thread."""
    body = await _read_body(reader)
    if body is None:
        return None
    frame = await asyncio.to_thread(_parse, body) if len(body) > BIG_FRAME else _parse(body)
    return frame, len(body)


async def _read_body(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise
        return None
    (size,) = _HEAD.unpack(head)
    if size > MAX_FRAME:
        while size:  # discard it without holding it in memory
            size -= len(await reader.readexactly(min(size, _SKIP_CHUNK)))
        raise ProtocolError(f"frame exceeds {MAX_FRAME} bytes")
    return await reader.readexactly(size)


def _parse(body: bytes) -> dict[str, Any]:
    try:
        frame = loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ProtocolError(f"frame is not readable JSON: {type(e).__name__}", _context_in(body)) from None
    if not isinstance(frame, dict):
        raise ProtocolError("frame is not a JSON object")
    return frame


def _context_in(body: bytes) -> str | None:
    """The context a frame we cannot parse names, so that it ends with an error, not silently.

    A runtime never writes such a frame (every document it sends is within DOC's depth and
    size bounds), so it comes from code that broke out of its sandbox, which could as well
    write a well-formed frame naming that context: trusting the name costs nothing more."""
    found = _CONTEXT.search(body, 0, _HEAD_BYTES)
    return found.group(1).decode("utf-8", "replace") if found else None
