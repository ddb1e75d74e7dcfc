"""The worker ABI as Python worker code sees it: batch, env, ctx, HostError.

Names follow Python (``acknowledge_all``, ``delay_seconds``); the JavaScript
spellings (``acknowledgeAll``, ``retryAll``, ``sendBatch``, ``waitUntil``) are
kept as aliases so a Version can be ported line by line.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ._pyworkflow import WorkflowBinding, is_workflow_class, run_workflow
from .types import HostError

HANDLER_NAMES = ("queue",)
# The same bounds as the JavaScript sandbox's; the parent enforces them anyway.
MAX_IN_FLIGHT = 256  # host calls sent and not yet answered
MAX_WAITING = 10_000  # host calls queued behind those
MAX_LOG_TEXT = 8 * 1024
MAX_ERROR_TEXT = 2 * 1024


def truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…[truncated]"


EXIT_HEAP_LIMIT = 86  # the parent maps this exit code to reason heap_limit
PACKAGE = "_sumi_worker"  # the Version's modules are this package's submodules


class _Sender(Protocol):
    step: Callable[[], str | None]  # the workflow step whose effect runs, for log lines

    def send(self, frame: dict[str, Any]) -> None: ...

    def log(self, level: str, text: str) -> None: ...


@dataclass(frozen=True)
class Message:
    id: str
    timestamp: int
    body: bytes
    attempts: int


def _check_delay(delay_seconds: Any, fn: str) -> None:
    if delay_seconds is None:
        return
    if not isinstance(delay_seconds, int) or isinstance(delay_seconds, bool):
        raise TypeError(f"{fn}: delay_seconds must be an int")
    if not 0 <= delay_seconds <= 43200:
        raise ValueError(f"{fn}: delay_seconds must be 0..43200")


def _with(base: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**base, **{k: v for k, v in extra.items() if v is not None}}


class Batch:
    def __init__(self, abi: Abi, spec: dict[str, Any]) -> None:
        self._abi = abi
        self.id: str = spec["id"]
        self.queue: str = spec["queue"]
        self.messages = tuple(
            Message(m["id"], m["timestamp"], base64.b64decode(m["body"]), m["attempts"]) for m in spec["messages"]
        )
        self._base = {"batchId": self.id}

    async def acknowledge(self, message_id: str) -> None:
        if not isinstance(message_id, str):
            raise TypeError("acknowledge: message id must be a str")
        await self._abi.call("batch.acknowledge", _with(self._base, messageId=message_id))

    async def retry(self, message_id: str, delay_seconds: int | None = None) -> None:
        if not isinstance(message_id, str):
            raise TypeError("retry: message id must be a str")
        _check_delay(delay_seconds, "retry")
        await self._abi.call("batch.retry", _with(self._base, messageId=message_id, delaySeconds=delay_seconds))

    async def acknowledge_all(self) -> None:
        await self._abi.call("batch.acknowledgeAll", dict(self._base))

    async def retry_all(self, delay_seconds: int | None = None) -> None:
        _check_delay(delay_seconds, "retry_all")
        await self._abi.call("batch.retryAll", _with(self._base, delaySeconds=delay_seconds))

    acknowledgeAll = acknowledge_all  # noqa: N815 - the JavaScript spelling
    retryAll = retry_all  # noqa: N815


def _encode_body(body: Any, fn: str) -> str:
    if isinstance(body, str):
        body = body.encode("utf-8")
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"{fn}: body must be str or bytes")
    return base64.b64encode(bytes(body)).decode("ascii")


class QueueBinding:
    def __init__(self, abi: Abi, name: str) -> None:
        self._abi, self._name = abi, name

    async def send(self, body: str | bytes, delay_seconds: int | None = None) -> None:
        _check_delay(delay_seconds, "send")
        msg = _with({"body": _encode_body(body, "send")}, delaySeconds=delay_seconds)
        await self._abi.call("queue.send", {"binding": self._name, "messages": [msg]})

    async def send_batch(self, entries: list[dict[str, Any]]) -> None:
        if not isinstance(entries, list) or not entries:
            raise TypeError("send_batch: expects a non-empty list of {'body', 'delay_seconds'?}")
        msgs = []
        for entry in entries:
            if not isinstance(entry, dict) or "body" not in entry:
                raise TypeError("send_batch: each entry must be a dict with 'body'")
            unknown = set(entry) - {"body", "delay_seconds", "delaySeconds"}
            if unknown:
                raise TypeError(f"send_batch: unknown keys {sorted(unknown)}")
            delay = entry.get("delay_seconds", entry.get("delaySeconds"))
            _check_delay(delay, "send_batch")
            body = _encode_body(entry["body"], "send_batch")
            msgs.append(_with({"body": body}, delaySeconds=delay))
        await self._abi.call("queue.send", {"binding": self._name, "messages": msgs})

    sendBatch = send_batch  # noqa: N815


class Env:
    """Attributes only: the Version's vars (str) and its bindings."""

    def __init__(self, abi: Abi, spec: dict[str, Any]) -> None:
        for name, value in (spec.get("vars") or {}).items():
            object.__setattr__(self, name, str(value))
        for name in spec.get("queueBindings") or ():
            object.__setattr__(self, name, QueueBinding(abi, name))
        for name in spec.get("workflowBindings") or ():
            object.__setattr__(self, name, WorkflowBinding(abi, name))

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("env is read-only")


class Ctx:
    def __init__(self) -> None:
        self.pending: list[asyncio.Future[Any]] = []

    def wait_until(self, awaitable: Awaitable[Any]) -> None:
        self.pending.append(asyncio.ensure_future(awaitable))

    waitUntil = wait_until  # noqa: N815


def _end_tasks_since(before: set[asyncio.Task[Any]]) -> None:
    """What an invocation started and left running ends with it, before its result leaves:
    nothing of it may run on, or call the Host, while the context is pooled (WF-46)."""
    for task in asyncio.all_tasks() - before:
        if task is not asyncio.current_task():
            task.cancel()


class Abi:
    def __init__(self, child: _Sender) -> None:
        self._child = child
        self._calls = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._waiting = 0
        # WF-44 provenance: only errors this runtime raised are in here.
        self._issued: weakref.WeakSet[BaseException] = weakref.WeakSet()
        self.halted = False  # a workflow execution reported its outcome: no more host calls (WF-46)

    def watch_step(self, step: Callable[[], str | None]) -> None:
        """What names the step of each line the worker prints (a workflow execution's)."""
        self._child.step = step

    async def call(self, method: str, args: dict[str, Any]) -> Any:
        """At most MAX_IN_FLIGHT calls are on the channel; a slot frees when the reply
        arrives (even for a call whose caller was cancelled), as the parent counts them."""
        if self.halted:
            await asyncio.get_running_loop().create_future()  # never answered, like a stopped context
        if self._waiting >= MAX_WAITING:
            raise RuntimeError(f"{method}: more than {MAX_WAITING} host calls waiting")
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        call_id = next(self._calls)
        future = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        frame = {"op": "host_call", "callId": call_id, "method": method, "args": args}
        self._child.send({**frame, "contextId": getattr(self._child, "context_id", "")})
        return await future

    def deliver_reply(self, frame: dict[str, Any]) -> None:
        future = self._pending.pop(frame.get("callId", -1), None)
        if future is None:
            return
        self._slots.release()
        if future.done():
            return
        if frame.get("ok"):
            future.set_result(frame.get("value"))
        else:
            error = frame.get("error") or {}
            exc = HostError(error.get("name", "error"), error.get("message", ""))
            self._issued.add(exc)
            future.set_exception(exc)

    def is_host_error(self, exc: BaseException) -> bool:
        return exc in self._issued

    def describe(self, main: Any) -> dict[str, Any]:
        public = getattr(main, "__all__", None) or [n for n in vars(main) if not n.startswith("_")]
        handlers = [n for n in HANDLER_NAMES if callable(getattr(main, n, None))]
        classes = [n for n in public if is_workflow_class(getattr(main, n, None))]
        return {"handlers": handlers, "workflowClasses": classes}

    def _error(self, exc: BaseException) -> dict[str, Any]:
        name = exc.name if isinstance(exc, HostError) else type(exc).__name__
        try:
            message = exc.message if isinstance(exc, HostError) else str(exc)
        except Exception:  # noqa: BLE001 - a worker's __str__ may raise
            message = "unreadable error"
        return {
            "name": truncate(str(name), 256),
            "message": truncate(str(message), MAX_ERROR_TEXT),
            "hostError": self.is_host_error(exc),
        }

    async def invoke_queue(
        self, main: Any, load_error: str | None, batch: dict[str, Any], env: dict[str, Any]
    ) -> dict[str, Any]:
        if load_error is not None:
            return {"ok": False, "reason": "threw", "error": {"name": "Error", "message": load_error}}
        handler = getattr(main, "queue", None)
        if not callable(handler):
            return {
                "ok": False,
                "reason": "threw",
                "error": {"name": "TypeError", "message": "main module has no queue handler"},
            }
        ctx = Ctx()
        before = asyncio.all_tasks()
        try:
            await handler(Batch(self, batch), Env(self, env), ctx)
            result: dict[str, Any] = {"ok": True}
        except MemoryError:
            os._exit(EXIT_HEAP_LIMIT)
        except BaseException as e:  # noqa: BLE001 - any throw is the handler's result (QC-32)
            result = {"ok": False, "reason": "threw", "error": self._error(e)}
        for outcome in await asyncio.gather(*ctx.pending, return_exceptions=True):
            if isinstance(outcome, BaseException):
                self._child.log("error", truncate(f"wait_until rejected: {outcome!r}", MAX_LOG_TEXT))
        _end_tasks_since(before)
        return result

    async def invoke_workflow(
        self, main: Any, load_error: str | None, invocation: dict[str, Any], env: dict[str, Any]
    ) -> dict[str, Any]:
        if load_error is not None:
            return {"kind": "errored", "reason": "run_threw", "message": load_error}
        before = asyncio.all_tasks()
        try:
            return await run_workflow(self, main, invocation, Env(self, env))
        except MemoryError:
            os._exit(EXIT_HEAP_LIMIT)
        finally:
            _end_tasks_since(before)
