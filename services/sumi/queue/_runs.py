"""One batch's run in the worker runtime, and the host calls its handler makes (QC-25..32).

A run takes a warm execution context of its (Consumer, Version) from the
engine's pool, or starts one while its BatchDelivered commits; it invokes the
queue handler only after the commit, hands the context back (or stops it, see
`_contexts`) and ends the batch from the handler's outcome. Settlement calls
are decided against the engine's state (bound to this batch: another batch's
ID is `unknown_batch`) and resolve only once their record has committed.
"""

import asyncio
import logging
from typing import Any, Protocol

from sumi.control.sends import sent
from sumi.core import ids, logs
from sumi.core import records as r
from sumi.core.clock import now_ms
from sumi.core.config import Settings
from sumi.engines.worklogs import LogTags, WorkerLogs
from sumi.queue._contexts import ContextPool, Key
from sumi.queue.rules import _decide as d
from sumi.queue.rules._control import Code, Consumer, ControlTable
from sumi.queue.rules._state import EngineState
from sumi.runtime import EnvSpec, HostError, Limits, Module, QueueBatch, QueueMessage
from sumi.runtime.types import Runtime

log = logging.getLogger("sumi.queue")


def new_id(prefix: str) -> str:
    return f"{prefix}_{ids.new_ulid()}"


def gone(uid: str, queue: str) -> Consumer:
    """A deleted Consumer's stand-in: only end_batch's "stopped" path can follow."""
    return Consumer(uid, "", queue, "", 1, 0, 1, 0, 0, None, "deleting")


class Workflows(Protocol):
    """The workflow engine's Caller Bindings as a queue handler reaches them (WF-18).

    Given to the engine by the service (sumi.host.queue_service, the workflow client), so
    this package never imports sumi.workflow."""

    async def call(self, code: Code | None, method: str, args: dict[str, Any]) -> Any: ...

    async def run(self) -> None: ...


class Host(Protocol):
    """What a run needs of its engine: the engine's state and tables, its context pool and
    runtimes, and its one way to commit records (so this module never imports the engine)."""

    settings: Settings
    state: EngineState
    control: ControlTable
    contexts: ContextPool
    workflows: Workflows
    worklogs: WorkerLogs
    runs: "dict[str, BatchRun]"
    wake: asyncio.Event

    def emit(self, records: list[Any], via: str) -> "asyncio.Future[None]": ...

    def consumer(self, uid: str) -> Consumer | None: ...

    def servable(self, key: Key) -> bool: ...

    async def runtime(self, kind: str, space: str = "") -> Runtime: ...

    async def bodies(self, queue_uid: str, mids: list[str]) -> dict[str, bytes]: ...


class BatchRun:
    def __init__(
        self,
        engine: Host,
        consumer_uid: str,
        batch: r.BatchDelivered,
        queue_name: str,
        messages: list[tuple[str, int, bytes | None]],  # None: a body to read back from the log
        committed: "asyncio.Future[None]",
    ) -> None:
        self.engine = engine
        self.consumer_uid = consumer_uid
        self.batch = batch
        self.queue_name = queue_name
        self.messages = messages
        self.committed = committed
        self.ctx: Any = None
        self.stopping = False
        self.task: asyncio.Task[None] | None = None
        self.code = engine.control.code(batch.versionUid)

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    def stop(self) -> None:
        """Stop the handler physically (a delete's stop boundary, a purge, shutdown)."""
        if self.stopping:
            return
        self.stopping = True
        if self.ctx is not None:
            asyncio.ensure_future(self._stop_ctx())

    async def _stop_ctx(self) -> None:
        try:
            await self.ctx.stop()
        except Exception:  # unconfirmed: a delete's boundary stays unproven (QC-42)
            log.exception("stopping context of batch %s", self.batch.batchId)
            self.engine.contexts.unconfirmed.add(self.consumer_uid)

    def settings(self) -> Consumer:
        c = self.engine.consumer(self.consumer_uid)
        if c is None:  # deleted meanwhile: only end_batch's "stopped" path can follow
            return gone(self.consumer_uid, self.batch.queueUid)
        return c

    async def _run(self) -> None:
        space = self.code.space if self.code is not None else None
        logs.tag(space=space, resource=self.consumer_uid, batch=self.batch.batchId)
        outcome, error = "threw", None
        try:
            outcome, error = await self._invoke()
        except Exception as exc:
            log.warning("batch %s: %r", self.batch.batchId, exc)
            error = repr(exc)
        if self.stopping and outcome != "returned":
            outcome = "stopped"
        # Handed back before the end is folded, with no await in between: the next batch of
        # this pair can take it as soon as the end frees its slot.
        self._release_ctx(outcome == "returned")
        try:
            now = now_ms()
            ended = self.engine.emit(
                d.end_batch(self.engine.state, self.settings(), self.batch.batchId, outcome, now, new_id, error),
                self.batch.queueUid,
            )
            # The slot is free once the end is folded; a next batch's records commit after it.
            self.engine.wake.set()
            await ended
        finally:
            self.engine.runs.pop(self.batch.batchId, None)
            self.engine.wake.set()

    def _release_ctx(self, returned: bool) -> None:
        """Give the context back to the warm pool, or stop it (see `_contexts`)."""
        ctx, self.ctx = self.ctx, None
        if ctx is None:
            return
        key = (self.consumer_uid, self.batch.versionUid)
        reusable = returned and not self.stopping and self.engine.servable(key)
        self.engine.contexts.give(key, ctx, reusable, self.settings().max_concurrency)

    async def _invoke(self) -> tuple[str, str | None]:
        code = self.code
        if code is None:
            await self.committed
            return "threw", "the picked Version is gone"
        key, limit = (self.consumer_uid, code.uid), self.settings().max_concurrency
        got = self.engine.contexts.acquire(key, lambda: self._start_ctx(code), lambda: self.engine.servable(key), limit)
        try:
            await self.committed  # QC-43: recorded before the handler starts
            messages = await self._bodies()  # while the context starts
        except BaseException:
            self.engine.contexts.release(key, got, limit)
            raise
        self.ctx = await got
        if self.stopping:
            await self._stop_ctx()
            return "stopped", None
        batch = QueueBatch(self.batch.batchId, self.queue_name, messages)
        env = EnvSpec(code.vars, list(code.queue_bindings), list(code.workflow_bindings))
        tags = LogTags(code.space, code.worker, code.uid, self.consumer_uid, batch_id=self.batch.batchId)
        self.ctx.log_sink = self.engine.worklogs.sink(tags)  # a warm context is retagged per batch
        result = await self.ctx.invoke_queue(batch, env, self.host_call)
        if result.ok:
            return "returned", None
        return "threw", f"{result.reason}: {result.error_name}: {result.error_message}"

    async def _bodies(self) -> list[QueueMessage]:
        """The batch's messages, their bodies past the engine's budget read back together."""
        unread = [mid for mid, _, body in self.messages if body is None]
        read = await self.engine.bodies(self.batch.queueUid, unread) if unread else {}
        out = []
        for (mid, ts, body), attempt in zip(self.messages, self.batch.attempts, strict=True):
            if body is None and mid not in read:
                raise RuntimeError(f"the body of {mid} was not found in the queue log")
            out.append(QueueMessage(mid, ts, read[mid] if body is None else body, attempt))
        return out

    async def _start_ctx(self, code: Code) -> Any:
        """A fresh context of this batch's Version, started while its BatchDelivered commits
        (the pool may hand it to another batch of the pair: it is rebound per invocation)."""
        rt = await self.engine.runtime(code.runtime, code.space)
        return await rt.start_context(
            [Module(n, c) for n, c in code.modules],
            code.main_module,
            Limits(cpu_ms=self.engine.settings.runtime_cpu_ms),
            host_call=self.host_call,
        )

    # ---- host calls ----------------------------------------------------------------------

    async def host_call(self, context_id: str, method: str, args: dict[str, Any]) -> Any:
        if method == "queue.send":
            return await self._send(args)
        if method.startswith("workflow."):  # a Caller Binding (WF-18): decided by the workflow engine
            return await self.engine.workflows.call(self.code, method, args)
        handler = _SETTLE.get(method)
        if handler is None:
            raise HostError("unknown_method", method)
        if args.get("batchId") != self.batch.batchId:
            raise HostError("unknown_batch", "not this batch")
        try:
            records = handler(self, args)
        except d.Rejected as rej:
            raise HostError(rej.code, rej.message) from None
        await self._durable(records)
        return None

    async def _durable(self, records: list[Any]) -> None:
        try:
            await self.engine.emit(records, self.batch.queueUid)  # this batch's partition commits them
        except Exception as exc:
            raise HostError("backend_unavailable", "the settlement could not be committed") from exc

    def _ack(self, args: dict[str, Any]) -> list[Any]:
        return d.acknowledge(self.engine.state, args["batchId"], args.get("messageId"), now_ms())

    def _retry(self, args: dict[str, Any]) -> list[Any]:
        return d.retry(
            self.engine.state,
            self.settings(),
            args["batchId"],
            args.get("messageId"),
            args.get("delaySeconds"),
            now_ms(),
            new_id,
        )

    def _ack_all(self, args: dict[str, Any]) -> list[Any]:
        return d.acknowledge_all(self.engine.state, args["batchId"], now_ms())

    def _retry_all(self, args: dict[str, Any]) -> list[Any]:
        return d.retry_all(
            self.engine.state, self.settings(), args["batchId"], args.get("delaySeconds"), now_ms(), new_id
        )

    async def _send(self, args: dict[str, Any]) -> None:
        """A queue binding's send: appended to the bound queue, resolved once durable."""
        assert self.code is not None
        await self._durable(sent(self.engine.control, self.code, args, now_ms(), new_id))


_SETTLE = {
    "batch.acknowledge": BatchRun._ack,
    "batch.retry": BatchRun._retry,
    "batch.acknowledgeAll": BatchRun._ack_all,
    "batch.retryAll": BatchRun._retry_all,
}
