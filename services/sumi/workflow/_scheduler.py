"""The workflow engine's scheduler: which instance gets an execution context, and when to look again.

It owns who waits for a context: the runnable instances, the ones blocked on a usable
Version, the ones whose next context runs alone, and the retries after a failed context
with the failures and deaths in a row that set their delay. The durable due times are the
instance table's (`_table`); the scheduler fires them. It reaches the engine only through
the `Launcher` port (so this module never imports the engine), and is told the time, so a
test drives it alone.

Nothing here is durable: after a restart every instance the log says needs a context is
runnable again (`rebuilt`), and the counts in a row start over.
"""

import asyncio
import heapq
import logging
from collections.abc import Mapping
from typing import Protocol

from sumi.core.config import Settings
from sumi.engines import fair
from sumi.runtime.types import WorkflowOutcome
from sumi.workflow._runs import LIMIT_STOPS, RUNTIME_FAILED, ContextRun, Live
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._control import WorkflowControl
from sumi.workflow.rules._state import Instance
from sumi.workflow.rules._table import InstanceTable

log = logging.getLogger("sumi.workflow")
RETRY_FIRST_MS, RETRY_MAX_MS = 100, 30_000  # after the runtime failed an instance
DEATHS_TO_END = 3  # the same attempt's context dying the same way this often in a row ends the instance
MAX_DEATH_TEXT = 4096


class Launcher(Protocol):
    """What the scheduler needs of the engine: the fold it reads, the live runs, the one way
    to commit a decision, and how a context starts."""

    table: InstanceTable
    control: WorkflowControl

    @property
    def runs(self) -> Mapping[str, Live]: ...

    def apply(self, key: str, decision: d.Decision) -> "asyncio.Future[None]": ...

    def start_run(self, key: str, class_name: str, allocation: list[tuple[str, int]], solo: bool) -> None: ...


class Scheduler:
    def __init__(self, settings: Settings, limits: d.Limits, engine: Launcher) -> None:
        self.engine = engine
        self.limits = limits
        self.contexts = settings.workflow_contexts
        self.per_space = settings.workflow_contexts_per_space
        self.wake = asyncio.Event()  # look again now: something became runnable or due
        self.runnable: set[str] = set()
        self.blocked: set[str] = set()  # runnable, but no usable Version right now
        self.solo: set[str] = set()  # evicted from a shared worker thread: the next context runs alone
        # Instances whose runtime failed them (it did not start, or died under them): retried after a
        # delay that doubles with each failure in a row, so a broken runtime is not a busy loop.
        self.failures: dict[str, int] = {}
        self.deaths: dict[str, tuple[tuple[str, tuple[int, ...]], int]] = {}  # (why, progress), in a row
        self.retries: list[tuple[int, str]] = []  # (when, key): a heap

    # ---- what becomes runnable ---------------------------------------------------------------

    def rebuilt(self, now: int) -> None:
        """The table holds the whole log: every instance it says needs a context gets one."""
        self.runnable = {k for k, inst in self.engine.table.instances.items() if d.needs_context(inst, now)}

    def mark(self, key: str) -> None:
        """A decision made the instance need a (new) context."""
        self.runnable.add(key)
        self.wake.set()

    def unblock(self) -> None:
        """The control log moved: a Version may have become usable."""
        self.runnable |= self.blocked
        self.blocked.clear()
        self.wake.set()

    def forget(self, key: str) -> None:
        """The instance was purged: nothing of it is kept."""
        self.failures.pop(key, None)
        self.deaths.pop(key, None)
        self.solo.discard(key)

    # ---- a step of the engine's clock ------------------------------------------------------------

    def fire(self, now: int) -> None:
        """Decide every durable due time that has come, and take the retries whose delay is over."""
        engine = self.engine
        for key, inst in engine.table.due_now(now):
            run = engine.runs.get(key)
            decision = d.due(inst, now, self.limits, run is not None)
            if decision.stop and run is not None:
                run.stop(decision.after_stop)
            engine.apply(key, decision)
        while self.retries and self.retries[0][0] <= now:
            self.runnable.add(heapq.heappop(self.retries)[1])

    def start_runs(self, now: int) -> None:
        """Live contexts are shared fairly among Spaces (`workflow_contexts` in all, at most
        `workflow_contexts_per_space` to one Space): a Space whose instances all wait inside
        their effects holds its share, never another Space's. More runnable instances wait."""
        runs = self.engine.runs
        free = self.contexts - len(runs)
        if free <= 0 or not self.runnable:
            return
        waiting: dict[str, list[str]] = {}
        for key in sorted(self.runnable):
            waiting.setdefault(self._space(key), []).append(key)
        held: dict[str, int] = {}
        for key in runs:
            space = self._space(key)
            held[space] = held.get(space, 0) + 1
        for key in fair.admit(waiting, held, free, self.per_space):
            self.runnable.discard(key)
            inst = self.engine.table.instances.get(key)
            if key in runs or inst is None or not d.needs_context(inst, now):
                continue
            self._start(key, inst)

    def start_alone(self, key: str, now: int) -> None:
        """A command made `key` runnable and nothing else waits: it starts now, not at the next
        step, so its context start joins the command's decision in one transaction (a new
        instance runs one commit sooner). With others waiting, the next step shares the
        contexts fairly, as always."""
        if self.runnable == {key}:
            self.start_runs(now)

    def _start(self, key: str, inst: Instance) -> None:
        control = self.engine.control
        wf = control.workflow(inst.workflow_uid)
        allocation = control.allocation(wf) if wf is not None and wf.state != "deleting" else []
        if wf is None or wf.class_name is None or not allocation:
            self.blocked.add(key)  # no usable Version: it runs once the control log gives one
            return
        solo = key in self.solo
        self.solo.discard(key)
        self.engine.start_run(key, wf.class_name, allocation, solo)

    def _space(self, key: str) -> str:
        inst = self.engine.table.instances.get(key)
        return "" if inst is None else inst.space

    def next_look(self) -> int | None:
        """When something is next due: a durable due time or a retry."""
        due = self.engine.table.next_due()
        retry = self.retries[0][0] if self.retries else None
        return min((t for t in (due, retry) if t is not None), default=None)

    # ---- after a context ---------------------------------------------------------------------------

    def ended(self, run: ContextRun, outcome: WorkflowOutcome, now: int) -> tuple[d.Decision | None, int | None]:
        """The context of `run` has physically stopped: what its outcome publishes (None while
        the run no longer owns the instance), and the delay before the next context (None: at
        once, if the instance needs one; `requeue` takes it once the end is decided)."""
        key = run.key
        inst = self.engine.table.instances.get(key)
        decision: d.Decision | None = None
        delay: int | None = None
        if inst is not None and inst.owner == run.token:
            decision, delay = self._after(run, inst, outcome, now)
        elif inst is not None and outcome.reason == "no_code":
            self.blocked.add(key)
        if outcome.reason == RUNTIME_FAILED and run.ctx is None:  # the runtime did not start: no code ran
            failures = self.failures[key] = self.failures.get(key, 0) + 1
            delay = backoff(failures)
        else:
            self.failures.pop(key, None)
        return decision, delay

    def requeue(self, key: str, delay: int | None, now: int) -> None:
        """After a run's end is decided (and every terminate that waited for it): the next
        context after the delay, or now if the instance still needs one."""
        inst = self.engine.table.instances.get(key)
        if delay is not None:
            heapq.heappush(self.retries, (now + delay, key))
        elif inst is not None and d.needs_context(inst, now):
            self.runnable.add(key)
        self.wake.set()

    def _after(
        self, run: ContextRun, inst: Instance, outcome: WorkflowOutcome, now: int
    ) -> tuple[d.Decision, int | None]:
        """What the stopped context's outcome publishes, and the delay before the next context."""
        if run.after_stop:  # a Host limit (WF-38)
            return d.Decision(run.after_stop), None
        if run.stopping:  # terminate, delete or shutdown: whoever stopped it decides
            return d.Decision(), None
        if outcome.kind == "stopped" and outcome.reason in LIMIT_STOPS:
            return d.outcome(inst, "errored", now, reason="run_threw", message=f"{outcome.reason}"), None
        if outcome.kind == "stopped" and outcome.reason == "evicted":  # a neighbour's fault, not a failure
            self.solo.add(run.key)
            return d.Decision(runnable=True), None
        if outcome.reason == RUNTIME_FAILED and run.ctx is None:
            return d.Decision(), None  # the runtime did not start: retried after a delay (`ended`)
        why = death(run, outcome)
        if why is not None:
            return self._died(run.key, inst, why, now)
        self.deaths.pop(run.key, None)
        return d.outcome(inst, outcome.kind, now, outcome.output, outcome.reason, outcome.message), None

    def _died(self, key: str, inst: Instance, why: str, now: int) -> tuple[d.Decision, int | None]:
        """A context died without the Host asking (a protocol rejection, a Host bug, a runtime
        failure). The next one replays after a growing delay; the same attempt dying the same
        way DEATHS_TO_END times in a row ends the instance, so effects are not re-run without
        bound (WF-41, WF-22)."""
        signature = (why, progress(inst))
        last, count = self.deaths.get(key, (None, 0))
        count = count + 1 if last == signature else 1
        log.warning("instance %s: its context died (%s), %d time(s) in a row at the same step", key, why, count)
        if count < DEATHS_TO_END:
            self.deaths[key] = (signature, count)
            return d.Decision(), backoff(count)
        self.deaths.pop(key, None)
        message = f"the execution context died {count} times in a row at the same step: {why}"
        return d.outcome(inst, "errored", now, reason="run_threw", message=message[:MAX_DEATH_TEXT]), None


def backoff(failures: int) -> int:
    return int(min(RETRY_FIRST_MS << (failures - 1), RETRY_MAX_MS))


def death(run: ContextRun, outcome: WorkflowOutcome) -> str | None:
    """Why the context died without the Host asking, or None: it ended as the Host asked or as
    the run decided."""
    if outcome.kind == "stopped":
        return f"{outcome.reason}: {outcome.message}" if outcome.message else str(outcome.reason)
    if outcome.kind == "suspended" and not run.closed:  # the runtime gave up on a host call the Host failed
        return f"a host call failed: {run.refused or 'unknown'}"
    return None


def progress(inst: Instance) -> tuple[int, ...]:
    """Where the run is: steps completed, attempts of unfinished steps, steps begun.

    Compared only for equality: a completed step drops its attempts, but it
    also adds one to the completed count, so any commit changes the tuple.
    """
    return len(inst.completed), sum(inst.attempts.values()), len(inst.pending)
