"""One execution context of one instance: start, run, answer its step calls, stop, publish.

A run records `InstanceContextStarted` (a new owner token, the Version it picked:
WF-33) and starts a fresh context meanwhile; it invokes `run` only after that
commit. Each step call is decided against the engine's fold and answered only
once its records committed (WF-41). Whatever way the run ends, the context is
stopped physically first (`ctx.stop()` returns only then), and only after that
does the run publish sleeping, waiting or a terminal status (WF-46).
"""

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from sumi.control.rules.state import VersionView
from sumi.control.sends import sent
from sumi.core import ids, logs
from sumi.core import records as r
from sumi.core.config import Settings
from sumi.engines.worklogs import LogTags, WorkerLogs
from sumi.runtime import EnvSpec, HostError, Limits, Module
from sumi.runtime.allocation import pick_version
from sumi.runtime.types import Runtime, StepRecord, WorkflowInvocation, WorkflowOutcome
from sumi.workflow._bindings import Bindings
from sumi.workflow._metrics import WorkflowMetrics
from sumi.workflow._spares import Spares
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._control import WorkflowControl
from sumi.workflow.rules._state import Instance

log = logging.getLogger("sumi.workflow")
LIMIT_STOPS = ("cpu_limit", "heap_limit", "wall_limit")
RUNTIME_FAILED = "runtime_failed"  # the runtime could not start or serve the context


class Live(Protocol):
    """What the engine's parts may do to a live run (a due time, a delete): stop it. A
    ContextRun is one; a test's fake may be."""

    def stop(self, after_stop: list[Any] | None = None) -> None: ...


class Host(Protocol):
    """What a run needs of its engine: the fold and the tables it decides against, the
    engine's one way to commit records, its runtimes and spares, and where a run's end
    goes (so this module never imports the engine; the engine satisfies this as it is)."""

    settings: Settings
    limits: d.Limits
    instances: dict[str, Instance]
    control: WorkflowControl
    spares: Spares
    bindings: Bindings
    worklogs: WorkerLogs
    metrics: WorkflowMetrics

    def now(self) -> int: ...

    def emit(self, key: str, records: Sequence[r.Record]) -> "asyncio.Future[None]": ...

    async def runtime(self, kind: str, space: str = "") -> Runtime: ...

    async def restart_runtimes(self) -> None: ...

    async def ended(self, run: "ContextRun", outcome: WorkflowOutcome) -> None: ...


def invocation(inst: Instance, class_name: str, limits: d.Limits) -> WorkflowInvocation:
    completed = {
        s.name: StepRecord(s.name, s.kind, s.ok, d.doc(s.result), s.error_name, s.error_message)  # type: ignore[arg-type]
        for s in inst.completed.values()
    }
    return WorkflowInvocation(
        class_name,
        inst.instance_id,
        d.doc(inst.params, f"the params of {inst.instance_id}"),
        completed,
        dict(inst.pending),
        steps_left=max(limits.max_steps - inst.steps_used, 0),
        lifetime_ends_at=inst.created_at + limits.lifetime_ms,
    )


class ContextRun:
    def __init__(
        self, engine: Host, key: str, class_name: str, allocation: list[tuple[str, int]], solo: bool = False
    ) -> None:
        self.engine = engine
        self.solo = solo  # in a worker thread of its own: its last context was evicted from a shared one
        self.key = key
        self.class_name = class_name
        self.allocation = allocation
        self.token = f"own_{ids.new_ulid()}"
        self.ctx: Any = None
        self.stopping = False  # asked to stop from outside (terminate, a limit, a delete, shutdown)
        self.closed = False  # a step call suspended or fenced it: nothing more commits from this context
        self.after_stop: list[Any] = []
        self.refused: str | None = None  # the last host call this run failed
        self.stopped = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    @property
    def inst(self) -> Instance:
        return self.engine.instances[self.key]

    def start(self) -> None:
        """Put the context start in the outbox now, beside whatever was decided in this same
        moment (a create and its first context start commit in one transaction), then run."""
        try:
            begun: _Started | _Ended | Exception = self._begin()
        except Exception as exc:  # surfaces in the run, as a failure there would
            begun = exc
        self.task = asyncio.create_task(self._run(begun))

    def stop(self, after_stop: list[Any] | None = None) -> None:
        """Stop the code physically (terminate, a limit, a delete, shutdown); `after_stop` then commits."""
        if self.stopping:
            return
        self.stopping = True
        self.after_stop += after_stop or []
        if self.ctx is not None:
            asyncio.ensure_future(self._stop_ctx())

    async def _run(self, begun: "_Started | _Ended | Exception") -> None:
        inst = self.inst
        logs.tag(space=inst.space, resource=inst.workflow_uid, instance=inst.instance_id)
        try:
            outcome = await self._execute(begun)
        except Exception as exc:  # the runtime failed: the context is gone, a new one replays
            log.warning("instance %s: %r", self.key, exc)
            outcome = WorkflowOutcome("stopped", reason=RUNTIME_FAILED, message=repr(exc))
        try:
            await self._stop_ctx()
            await self.engine.ended(self, outcome)
        finally:
            if not self.stopped.done():
                self.stopped.set_result(None)

    def _begin(self) -> "_Started | _Ended":
        """The context start's records, put in the outbox (folded already): the Version's code
        and the commit to wait for, or the outcome that ends the run before any context."""
        inst = self.inst
        version = pick_version(self.allocation, f"{inst.instance_id}/{inst.contexts + 1}")
        code = self.engine.control.code(version)
        if code is None:  # the Version left meanwhile: the instance waits for a usable one
            return _Ended(WorkflowOutcome("stopped", reason="no_code"), None)
        decision = d.start(inst, self.token, version, self.engine.now(), self.engine.limits)
        committed = self.engine.emit(self.key, decision.records)
        if inst.owner != self.token:  # the lifetime ended instead (WF-38)
            return _Ended(WorkflowOutcome("stopped", reason="not_started"), committed)
        return _Started(code, committed)

    async def _execute(self, begun: "_Started | _Ended | Exception") -> WorkflowOutcome:
        if isinstance(begun, Exception):
            raise begun
        if isinstance(begun, _Ended):
            if begun.committed is not None:
                await begun.committed
            return begun.outcome
        code, committed = begun
        if self.stopping:  # stopped before its context (a terminate right after the create)
            await committed
            return WorkflowOutcome("stopped", reason="not_started")
        inst = self.inst
        await self._start_ctx(code, committed)
        if self.stopping:
            return WorkflowOutcome("stopped", reason="stopped")
        env = EnvSpec(code.vars, list(code.queue_bindings), list(code.workflow_bindings))
        tags = LogTags(code.space, code.worker, code.uid, inst.workflow_uid, instance_id=inst.instance_id)
        self.ctx.log_sink = self.engine.worklogs.sink(tags)
        result: WorkflowOutcome = await self.ctx.invoke_workflow(
            invocation(self.inst, self.class_name, self.engine.limits), env, self.call
        )
        return result

    async def _start_ctx(self, code: VersionView, committed: "asyncio.Future[None]") -> None:
        """A fresh context (never reused: WF-32): a spare started ahead, or one started while
        the context start commits. Contexts of one Version may share a worker thread; a run
        whose context was evicted from one (another context there broke a limit) runs alone,
        where a limit it breaks is its own."""
        spare = None if self.solo else self.engine.spares.take(code)
        if spare is not None:
            self.ctx = spare
            await committed
            return
        rt = await self.engine.runtime(code.runtime, code.space)
        starting = asyncio.ensure_future(
            rt.start_context(
                [Module(n, c) for n, c in code.modules],
                code.main_module,
                Limits(cpu_ms=self.engine.settings.runtime_cpu_ms),
                host_call=self.call,
                share=None if self.solo else code.uid,
            )
        )
        try:
            await committed
        finally:
            self.ctx = await starting

    async def _stop_ctx(self) -> None:
        ctx = self.ctx
        if ctx is None:
            return
        try:
            await ctx.stop()
        except Exception:  # unproven: only the runtime process's exit proves the stop (WF-14, WF-46)
            log.exception("stopping the context of %s; restarting its runtime", self.key)
            await self.engine.restart_runtimes()

    # ---- host calls ---------------------------------------------------------------------

    async def call(self, context_id: str, method: str, args: dict[str, Any]) -> Any:
        started = time.monotonic()
        try:
            return await self._call(method, args)
        except HostError as exc:  # kept: the runtime may give up on the run for it (the scheduler's `death`)
            self.refused = f"{method}: {exc.name}: {exc.message}"
            raise
        except Exception as exc:  # a bug in the Host: the runtime sees backend_unavailable
            self.refused = f"{method}: {exc!r}"
            raise
        finally:
            if (inst := self.engine.instances.get(self.key)) is not None:
                self.engine.metrics.call(inst.space, inst.workflow_uid, method, time.monotonic() - started)

    async def _call(self, method: str, args: dict[str, Any]) -> Any:
        code = self.engine.control.code(self.inst.version_uid or "")
        if method.startswith("workflow."):
            return await self.engine.bindings.call(code, method, args)
        if method == "queue.send" and code is not None:  # an effect's send: at least once (WF-41)
            records = sent(self.engine.control, code, args, self.engine.now(), _new_msg_id)
            try:
                await self.engine.emit(self.key, records)
            except Exception as exc:
                raise HostError("backend_unavailable", "the messages could not be committed") from exc
            return None
        if self.stopping or self.closed:
            raise HostError("fenced", "this execution context is being stopped")
        decision = d.call(self.inst, self.token, method, args, self.engine.now(), self.engine.limits)
        try:
            await self.engine.emit(self.key, decision.records)
        except Exception as exc:
            raise HostError("backend_unavailable", "the step could not be committed") from exc
        if decision.stop:
            self.after_stop += decision.after_stop
            self.closed = True  # no further call commits; the outcome follows, then the stop
        if decision.error is not None:
            raise HostError(*decision.error)
        return decision.reply


class _Started(NamedTuple):
    code: VersionView
    committed: "asyncio.Future[None]"


class _Ended(NamedTuple):
    outcome: WorkflowOutcome
    committed: "asyncio.Future[None] | None"


def _new_msg_id(prefix: str) -> str:
    return f"{prefix}_{ids.new_ulid()}"
