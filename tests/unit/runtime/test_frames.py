"""The frame reader (runtime/_frames.py): a frame the Host cannot parse still names its context."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest

from sumi.runtime._frames import read_frame
from sumi.runtime.rules._protocol import ProtocolError


def _reader(*bodies: bytes) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    for body in bodies:
        reader.feed_data(struct.pack(">I", len(body)) + body)
    reader.feed_eof()
    return reader


async def test_an_unreadable_frame_names_its_context() -> None:  # DOC-1 (MAX_DEPTH), WF-22, WF-46
    # Deeper than Python's json reaches: before, the frame was dropped and its instance stayed running.
    deep = b'{"op":"invoke_result","reqId":7,"contextId":"ctx-1","kind":"complete","output":' + b"[" * 100_000
    reader = _reader(deep + b"]" * 100_000 + b"}", json.dumps({"op": "log", "contextId": "ctx-2"}).encode())
    with pytest.raises(ProtocolError) as info:
        await read_frame(reader)
    assert info.value.context_id == "ctx-1"
    assert await read_frame(reader) == {"op": "log", "contextId": "ctx-2"}  # the stream stays in step


async def test_numbers_are_read_as_doubles() -> None:  # DOC-2
    frame = await read_frame(_reader(b'{"op":"x","n":1152921504606846977,"m":12}'))
    assert frame == {"op": "x", "n": 2.0**60, "m": 12} and isinstance(frame["m"], int)
