"""One framed request/reply channel to a runtime child process.

Both runtimes speak the same frames; this class owns the process, the reader
loop, reply correlation by ``reqId``, routing of ``host_call`` frames to the
owning context, and log forwarding. What differs (how the child is started,
what a context is) lives in ``_jshost`` and ``_pyhost``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from . import _frames
from .types import HostCall, HostError

EXITED = {"op": "runtime_exited"}
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class ContextSink(Protocol):
    """What a channel needs from a context: where host calls and stop notices go."""

    id: str
    host_call: HostCall | None
    host_tasks: set[asyncio.Task[None]]

    def on_stopped(self, reason: str) -> None: ...


class Channel:
    def __init__(
        self,
        argv: Sequence[str],
        logger: logging.Logger,
        on_exit: Callable[[Channel], None] | None = None,
        exit_reason: Callable[[int | None], str] = lambda returncode: "stopped",
        label: str = "runtime",
        stderr_level: int = logging.DEBUG,
        **popen: Any,
    ) -> None:
        self._argv = list(argv)
        self._exit_reason = exit_reason
        self._label = label
        self._stderr_level = stderr_level
        self._popen = popen
        self._log = logger
        self._on_exit = on_exit
        self._req_ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.contexts: dict[str, ContextSink] = {}
        self.proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = False

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            **self._popen,
        )
        self._tasks = [asyncio.create_task(self._read_frames()), asyncio.create_task(self._read_stderr())]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and not self.closed

    async def send(self, frame: dict[str, Any]) -> None:
        if not self.alive:
            return
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(_frames.encode(frame))
            await self.proc.stdin.drain()
        except (ConnectionError, RuntimeError):
            pass  # the reader loop notices the death and fails what is pending

    async def request(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send a frame with a fresh reqId; the reply frame, or EXITED if the child died."""
        if not self.alive:
            return EXITED
        req_id = next(self._req_ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = future
        await self.send({**frame, "reqId": req_id})
        return await future

    async def _read_frames(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while (frame := await _frames.read_frame(self.proc.stdout)) is not None:
                self._dispatch(frame)
        except (asyncio.IncompleteReadError, ValueError) as e:
            self._log.error("runtime channel broken: %s", e)
        finally:
            await self._exited()

    def _dispatch(self, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        if op == "host_call":
            self._start_host_call(frame)
        elif op == "log":
            self._log.log(
                _LEVELS.get(frame.get("level", "info"), logging.INFO),
                "[%s] %s",
                frame.get("contextId"),
                frame.get("text"),
                extra={"context_id": frame.get("contextId")},
            )
        elif op == "context_stopped":
            ctx = self.contexts.pop(str(frame.get("contextId")), None)
            if ctx is not None:
                ctx.on_stopped(str(frame.get("reason")))
        elif (future := self._pending.pop(frame.get("reqId", -1), None)) is not None:
            if not future.done():
                future.set_result(frame)

    def _start_host_call(self, frame: dict[str, Any]) -> None:
        ctx = self.contexts.get(str(frame.get("contextId")))
        if ctx is None:
            return  # a stopped context: its calls are dropped, never served (WF-46)
        task = asyncio.create_task(self._serve_host_call(ctx, frame))
        ctx.host_tasks.add(task)
        task.add_done_callback(ctx.host_tasks.discard)

    async def _serve_host_call(self, ctx: ContextSink, frame: dict[str, Any]) -> None:
        reply: dict[str, Any] = {"op": "host_reply", "contextId": ctx.id, "callId": frame.get("callId")}
        try:
            if ctx.host_call is None:
                raise HostError("unsupported", f"no host handler for {frame.get('method')}")
            value = await ctx.host_call(ctx.id, str(frame.get("method")), frame.get("args") or {})
            reply.update(ok=True, value=value)
        except HostError as e:
            reply.update(ok=False, error={"name": e.name, "message": e.message})
        except Exception as e:  # an unexpected Host failure is a transient one to the worker
            self._log.exception("host call %s failed", frame.get("method"))
            reply.update(ok=False, error={"name": "backend_unavailable", "message": str(e)})
        if ctx.id in self.contexts:
            await self.send(reply)

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in self.proc.stderr:
            self._log.log(self._stderr_level, "[%s] %s", self._label, line.decode("utf-8", "replace").rstrip())

    async def _exited(self) -> None:
        self._kill()
        if self.proc is not None:
            await self.proc.wait()
        for future in self._pending.values():
            if not future.done():
                future.set_result(EXITED)
        self._pending.clear()
        contexts, self.contexts = self.contexts, {}
        reason = self._exit_reason(self.proc.returncode if self.proc is not None else None)
        for ctx in contexts.values():
            ctx.on_stopped(reason)
        if not self.closed and self._on_exit is not None:
            self._on_exit(self)
        self.closed = True

    def _kill(self) -> None:
        # os.kill, not Process.kill(): Popen.send_signal() polls first and may
        # reap the child itself, stealing the exit status (and with it the
        # cpu_limit/heap_limit reason) from asyncio's child watcher.
        if self.proc is not None and self.proc.returncode is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def close(self) -> None:
        if self.proc is None:
            return
        self.closed = True
        self._kill()
        await self.proc.wait()
        for task in self._tasks:
            await asyncio.gather(task, return_exceptions=True)
