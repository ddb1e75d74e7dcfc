"""One framed request/reply channel to a runtime child process.

Both runtimes speak the same frames; this class owns the process, the reader
loop, reply correlation by ``reqId``, routing of ``host_call`` frames to the
owning context, and log forwarding. What differs (how the child is started,
what a context is) lives in ``_jshost`` and ``_pyhost``.

Every frame is checked by ``_protocol`` before it acts: the child runs
untrusted code. A bad frame stops the context it names (``violated``), never
the channel; frames of a context being stopped for that are dropped.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import _frames, _lograte, _walls
from .rules import _protocol
from .rules._protocol import Invocation, ProtocolError
from .types import HostCall, HostError, LogSink

EXITED = {"op": "runtime_exited"}
# What a context stopped for a bad frame may still send: how its requests and its stop end.
_AFTER_VIOLATION = {*_protocol.REPLIES.values(), "error", "context_stopped"}
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}


class ContextSink(Protocol):
    """What a channel needs from a context: where host calls and stop notices go."""

    id: str
    host_call: HostCall | None
    host_tasks: set[asyncio.Task[None]]
    log_sink: LogSink | None  # None: what it prints goes to the Host's own log

    def on_stopped(self, reason: str) -> None: ...

    def violated(self, reason: str) -> None:
        """The context broke the protocol: stop it (and only it)."""
        ...


@dataclass
class _Request:
    op: str
    context_id: str | None
    future: asyncio.Future[dict[str, Any]]
    invocation: Invocation | None = None


@dataclass
class _ContextState:
    invocations: dict[int, Invocation] = field(default_factory=dict)  # by the invoke's reqId
    violated: bool = False
    logs: _lograte.LogBucket = field(default_factory=_lograte.LogBucket)


class Channel:
    def __init__(
        self,
        argv: Sequence[str],
        logger: logging.Logger,
        on_exit: Callable[[Channel], None] | None = None,
        exit_reason: Callable[[int | None], str] = lambda returncode: "stopped",
        label: str = "runtime",
        stderr_level: int = logging.DEBUG,
        launcher: bool = False,
        **popen: Any,
    ) -> None:
        self._argv = list(argv)
        self._exit_reason = exit_reason
        self._label = label
        self._stderr_level = stderr_level
        self._popen = popen
        self._launcher = launcher  # argv starts a wall's launcher (bwrap, unshare) that forks the child
        self._pidfd: int | None = None
        self._log = logger
        self._on_exit = on_exit
        self._req_ids = itertools.count(1)
        self._pending: dict[int, _Request] = {}
        self._state: dict[str, _ContextState] = {}
        self.contexts: dict[str, ContextSink] = {}
        self.proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = False
        self._heavy = asyncio.Lock()  # large host calls are checked off the loop, one at a time

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            **self._popen,
        )
        if self._launcher:
            await self._find_sandboxed()
        self._tasks = [asyncio.create_task(self._read_frames()), asyncio.create_task(self._read_stderr())]

    async def _find_sandboxed(self) -> None:
        """Hold a pidfd of the process the launcher forked: stopping means killing it."""
        assert self.proc is not None
        for _ in range(2000):
            pid = _walls.sandboxed_pid(self.proc.pid)
            if pid:
                try:
                    self._pidfd = os.pidfd_open(pid)
                except OSError:
                    pass  # already gone: the launcher exits by itself
                return
            if self.proc.returncode is not None:
                return
            await asyncio.sleep(0.001)

    @property
    def sandboxed_pid(self) -> int | None:
        """The pid of the runtime process itself (inside its walls), for checks."""
        if self.proc is None:
            return None
        return _walls.command_pid(self.proc.pid) or None if self._launcher else self.proc.pid

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
        """Send a frame with a fresh reqId; the checked reply frame, or EXITED if the child died.

        The reply must be one the request's op allows, for the same context; an
        ``invoke_queue`` / ``invoke_workflow`` opens the window in which that context's
        host calls may name its batch (or steps) and bindings, and its reply closes it.
        """
        if not self.alive:
            return EXITED
        req_id = next(self._req_ids)
        context_id = frame.get("contextId")
        request = _Request(
            str(frame["op"]),
            context_id if isinstance(context_id, str) else None,
            asyncio.get_running_loop().create_future(),
        )
        if request.op in ("invoke_queue", "invoke_workflow") and request.context_id is not None:
            request.invocation = Invocation.of(frame)
            self._state_of(request.context_id).invocations[req_id] = request.invocation
        self._pending[req_id] = request
        await self.send({**frame, "reqId": req_id})
        return await request.future

    def _state_of(self, context_id: str) -> _ContextState:
        state = self._state.get(context_id)
        if state is None:
            state = self._state[context_id] = _ContextState()
        return state

    async def _read_frames(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            while True:
                try:
                    read = await _frames.read_sized_frame(self.proc.stdout)
                except ProtocolError as e:
                    self._violation(e)
                    continue
                if read is None:
                    break
                frame, size = read
                try:
                    self._dispatch(frame, size > _frames.BIG_FRAME)
                except ProtocolError as e:
                    self._violation(e)
        except (asyncio.IncompleteReadError, ValueError) as e:
            self._log.error("runtime channel broken: %s", e)
        finally:
            await self._exited()

    def _violation(self, error: ProtocolError) -> None:
        """Stop the context a bad frame names; a frame that names none is dropped."""
        self._log.warning("[%s] bad frame from the runtime: %s", error.context_id or self._label, error)
        ctx = self.contexts.get(error.context_id) if error.context_id is not None else None
        if ctx is None:
            return
        state = self._state_of(ctx.id)
        if not state.violated:
            state.violated = True
            ctx.violated(str(error))

    def _dispatch(self, frame: dict[str, Any], big: bool = False) -> None:
        op = frame.get("op")
        context_id = _protocol.context_of(frame)
        state = self._state.get(context_id) if context_id is not None else None
        if state is not None and state.violated and op not in _AFTER_VIOLATION:
            return  # a context being stopped for a bad frame says nothing more
        if op == "host_call":
            self._start_host_call(frame, big)
        elif op == "log":
            level, text, dropped, step = _protocol.check_log(frame)
            self._worker_log(context_id, level, text, dropped, step)
        elif op == "context_stopped":
            reason = _protocol.check_stopped(frame)
            self._flush_drops(context_id)
            ctx = self.contexts.pop(context_id, None) if context_id is not None else None
            self._state.pop(context_id or "", None)
            if ctx is not None:
                ctx.on_stopped(reason)
        else:
            self._answer(frame)

    def _answer(self, frame: dict[str, Any]) -> None:
        req_id = frame.get("reqId")
        request = self._pending.get(req_id) if isinstance(req_id, int) and not isinstance(req_id, bool) else None
        if request is None or not isinstance(req_id, int):
            raise ProtocolError(f"{frame.get('op')!r} answers no pending request", _protocol.context_of(frame))
        reply = _protocol.check_reply(request.op, request.context_id, frame)
        del self._pending[req_id]
        if request.context_id is not None and (state := self._state.get(request.context_id)) is not None:
            state.invocations.pop(req_id, None)
        if request.invocation is not None:
            self._log_outcome(request.context_id, request.op, reply)
        if not request.future.done():
            request.future.set_result(reply)

    def _worker_log(
        self, context_id: str | None, level: str, text: str, dropped: int = 0, step: str | None = None
    ) -> None:
        """A line the context printed: to its sink within its rate, else to the Host's log.
        Lines the runtime process already refused (`dropped`) join this side's count."""
        ctx = self.contexts.get(context_id) if context_id is not None else None
        if ctx is None or ctx.log_sink is None:
            self._log.log(_LEVELS[level], "[%s] %s", context_id, text, extra={"context_id": context_id})
            return
        bucket = self._state_of(ctx.id).logs
        if dropped:
            bucket.dropped += dropped
        elif bucket.admit(time.monotonic()):
            self._flush_drops(ctx.id)
            ctx.log_sink(level, text, 0, step)

    def _flush_drops(self, context_id: str | None) -> None:
        """Say how many lines the bucket refused since it last said so."""
        ctx = self.contexts.get(context_id) if context_id is not None else None
        state = self._state.get(context_id) if context_id is not None else None
        if ctx is None or ctx.log_sink is None or state is None:
            return
        if dropped := state.logs.take_dropped():
            ctx.log_sink("warn", _lograte.drop_notice(dropped), dropped, None)

    def _log_outcome(self, context_id: str | None, op: str, reply: dict[str, Any]) -> None:
        """An invocation ended: its drops are told, and its uncaught error (never rate-bound)."""
        self._flush_drops(context_id)
        ctx = self.contexts.get(context_id) if context_id is not None else None
        line = _lograte.outcome_line(op, reply)
        if ctx is not None and ctx.log_sink is not None and line is not None:
            ctx.log_sink("error", line, 0, None)

    def _start_host_call(self, frame: dict[str, Any], big: bool = False) -> None:
        context_id = _protocol.context_of(frame)
        ctx = self.contexts.get(context_id) if context_id is not None else None
        if ctx is None:
            return  # a stopped context: its calls are dropped, never served (WF-46)
        calls, in_flight = self._state_of(ctx.id).invocations, len(ctx.host_tasks)
        if big:  # its documents are checked off the event loop, as its frame was parsed
            task = asyncio.create_task(self._check_then_serve(ctx, frame, calls, in_flight))
        else:
            try:
                call = _protocol.check_host_call(frame, calls, in_flight)
            except _protocol.Refused as e:
                task = asyncio.create_task(self.send(_refusal(ctx, frame, e)))
            else:
                task = asyncio.create_task(self._serve_host_call(ctx, call))
        ctx.host_tasks.add(task)
        task.add_done_callback(ctx.host_tasks.discard)

    async def _check_then_serve(self, ctx: ContextSink, frame: dict[str, Any], calls: Any, in_flight: int) -> None:
        try:  # one at a time: the loop goes on serving this runtime's other contexts
            async with self._heavy:
                call = await asyncio.to_thread(_protocol.check_host_call, frame, calls, in_flight)
        except _protocol.Refused as e:
            await self.send(_refusal(ctx, frame, e))
        except ProtocolError as e:
            self._violation(e)
        else:
            await self._serve_host_call(ctx, call)

    async def _serve_host_call(self, ctx: ContextSink, call: _protocol.HostCallFrame) -> None:
        reply: dict[str, Any] = {"op": "host_reply", "contextId": ctx.id, "callId": call.call_id}
        try:
            if ctx.host_call is None:
                raise HostError("unsupported", f"no host handler for {call.method}")
            value = await ctx.host_call(ctx.id, call.method, call.args)
            reply.update(ok=True, value=value)
        except HostError as e:
            reply.update(ok=False, error={"name": e.name, "message": e.message})
        except Exception as e:  # an unexpected Host failure is a transient one to the worker
            self._log.exception("host call %s failed", call.method)
            reply.update(ok=False, error={"name": "backend_unavailable", "message": str(e)})
        # No longer in flight once the reply is on its way: the runtime counts a call until its
        # reply arrives, so by this count we never see more calls in flight than it allows.
        ctx.host_tasks.discard(asyncio.current_task())
        if ctx.id in self.contexts:
            await self.send(reply)

    def forget(self, context_id: str) -> None:
        """Drop what the channel kept about a context that has stopped."""
        self.contexts.pop(context_id, None)
        self._state.pop(context_id, None)

    async def _read_stderr(self) -> None:
        """The child's stderr, line by line, each cut at MAX_TEXT (a line may never end)."""
        assert self.proc is not None and self.proc.stderr is not None
        pending = b""
        while chunk := await self.proc.stderr.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            if len(pending) > _protocol.MAX_TEXT:
                lines.append(pending)
                pending = b""
            for line in lines:
                text = line[: _protocol.MAX_TEXT].decode("utf-8", "replace").rstrip()
                self._log.log(self._stderr_level, "[%s] %s", self._label, text)

    async def _exited(self) -> None:
        self._kill()
        if self.proc is not None:
            await self.proc.wait()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        for request in self._pending.values():
            if not request.future.done():
                request.future.set_result(EXITED)
        self._pending.clear()
        self._state.clear()
        contexts, self.contexts = self.contexts, {}
        reason = self._exit_reason(self.proc.returncode if self.proc is not None else None)
        for ctx in contexts.values():
            ctx.on_stopped(reason)
        if not self.closed and self._on_exit is not None:
            self._on_exit(self)
        self.closed = True

    def _kill(self) -> None:
        # Behind a launcher, kill the process it forked, the first of a new PID
        # namespace: the kernel then kills all of that namespace before the
        # launcher can reap it and exit, so the launcher's exit (which we await)
        # means nothing of the sandbox runs any more. Killing the launcher
        # instead would return before its children died.
        # os.kill, not Process.kill(): Popen.send_signal() polls first and may
        # reap the child itself, stealing the exit status (and with it the
        # cpu_limit/heap_limit reason) from asyncio's child watcher.
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
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


def _refusal(ctx: ContextSink, frame: dict[str, Any], e: _protocol.Refused) -> dict[str, Any]:
    error = {"name": e.name, "message": e.message}
    return {"op": "host_reply", "contextId": ctx.id, "callId": frame["callId"], "ok": False, "error": error}
