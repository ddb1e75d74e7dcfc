"""Child process of the ``python`` runtime: one execution context.

Python worker code owns this process: there is no language sandbox, and it can
write any frame on the channel. The parent starts it behind the OS walls
(``_walls``: empty environment, own network namespace, user 65534, read-only
view of only the interpreter, the runtime's code and the Version) and checks
every frame it writes (``_protocol``). The process boundary also gives the
ABI's other guarantees: a fresh interpreter per context (no state survives
between contexts, WF-32), a memory limit, CPU measured from outside, and a physical stop (SIGKILL)
the Host can confirm (WF-26, WF-46).

Run as ``python -m sumi.runtime._pychild``; frames on stdin/stdout as in
``_frames``. The first frame is ``start_context``.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import resource
import sys
from collections.abc import Callable
from typing import Any

from . import _confine, _frames
from ._pyabi import EXIT_HEAP_LIMIT, MAX_ERROR_TEXT, MAX_LOG_TEXT, PACKAGE, Abi, truncate


class Limits:
    """Memory: RLIMIT_AS, so allocation beyond the budget raises MemoryError, which ends the
    process; one process and a bounded number of threads (``_confine``), so it holds for the
    context as a whole. CPU is not limited here: worker code owns this process and could lift any
    timer or soft limit set in it, so the Host measures and stops it from outside (``_cpu``)."""

    def __init__(self, heap_mb: int) -> None:
        resource.setrlimit(resource.RLIMIT_AS, (_address_space() + heap_mb * 1024 * 1024,) * 2)
        _confine.confine()


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class Child:
    def __init__(self, out_fd: int) -> None:
        self._out = out_fd
        self.context_id = ""
        self.abi = Abi(self)
        self.main: Any = None
        self.load_error: str | None = None
        self.step: Callable[[], str | None] = lambda: None  # set by a workflow execution (_pyabi)
        self.limits: Limits | None = None

    def send(self, frame: dict[str, Any]) -> None:
        data = _frames.encode(frame)
        while data:
            data = data[os.write(self._out, data) :]

    def log(self, level: str, text: str) -> None:
        frame = {"op": "log", "contextId": self.context_id, "level": level, "text": text}
        if (step := self.step()) is not None:
            frame["step"] = step
        self.send(frame)

    def start(self, frame: dict[str, Any]) -> None:
        self.context_id = str(frame["contextId"])
        limits = frame.get("limits") or {}
        self.limits = Limits(int(limits.get("heapMb") or 128))
        sys.path.insert(0, str(frame["root"]))
        main = str(frame["mainModule"]).removesuffix(".py").replace("/", ".")
        try:
            self.main = importlib.import_module(f"{PACKAGE}.{main}")
        except MemoryError:
            raise
        except BaseException as e:  # a broken Version is data, not a crash
            self.load_error = truncate(f"{type(e).__name__}: {e}", MAX_ERROR_TEXT)
        self.send({"op": "started", "reqId": frame["reqId"], "loadError": self.load_error})

    def load_info(self, frame: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"op": "load_info_result", "reqId": frame["reqId"]}
        if self.load_error is not None:
            reply["loadError"] = self.load_error
        else:
            reply.update(self.abi.describe(self.main))
        self.send(reply)

    async def invoke(self, frame: dict[str, Any]) -> None:
        """invoke_queue or invoke_workflow; one invoke_result frame."""
        if frame["op"] == "invoke_queue":
            result = await self.abi.invoke_queue(self.main, self.load_error, frame["batch"], frame["env"])
        else:
            result = await self.abi.invoke_workflow(self.main, self.load_error, frame["invocation"], frame["env"])
        self.send({"op": "invoke_result", "reqId": frame["reqId"], "contextId": self.context_id, **result})

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_frames.MAX_FRAME)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
        tasks: set[asyncio.Task[None]] = set()
        while (frame := await _frames.read_frame(reader)) is not None:
            op = frame.get("op")
            if op == "start_context":
                self.start(frame)
            elif op == "load_info":
                self.load_info(frame)
            elif op in ("invoke_queue", "invoke_workflow"):
                task = asyncio.create_task(self.invoke(frame))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            elif op == "host_reply":
                self.abi.deliver_reply(frame)


class _LogStream:
    """sys.stdout/sys.stderr of worker code: lines become log frames."""

    def __init__(self, child: Child, level: str) -> None:
        self._child, self._level, self._buf = child, level, ""

    def write(self, text: str) -> int:
        self._buf += text
        *lines, self._buf = self._buf.split("\n")
        if len(self._buf) > MAX_LOG_TEXT:  # a line that never ends is cut, not held
            lines.append(self._buf)
            self._buf = ""
        for line in lines:
            self._child.log(self._level, truncate(line, MAX_LOG_TEXT))
        return len(text)

    def flush(self) -> None:
        if self._buf:
            self._child.log(self._level, self._buf)
            self._buf = ""


def main() -> None:
    # fd 1 is the frame channel; nothing else may write there, so worker
    # output (print, C extensions writing to fd 1) goes to stderr instead.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.dont_write_bytecode = True
    child = Child(out_fd)
    sys.stdout = _LogStream(child, "info")
    try:
        asyncio.run(child.serve())
    except MemoryError:
        os._exit(EXIT_HEAP_LIMIT)
    except (json.JSONDecodeError, ValueError) as e:
        print(f"runtime protocol error: {e}", file=sys.stderr)
        os._exit(2)


if __name__ == "__main__":
    main()
