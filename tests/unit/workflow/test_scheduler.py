"""The workflow engine's scheduler (`sumi.workflow._scheduler`), alone: which runnable instance
gets a context and when it looks again, driven through a fake engine with a real instance
table and a clock the test sets. No broker, no runtime."""

from dataclasses import dataclass, field
from typing import Any

from sumi.control.rules.state import WorkflowView
from sumi.core import records as r
from sumi.core.config import Settings
from sumi.runtime.types import WorkflowOutcome
from sumi.workflow._runs import RUNTIME_FAILED
from sumi.workflow._scheduler import DEATHS_TO_END, RETRY_FIRST_MS, Scheduler
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._table import InstanceTable
from tests.unit.workflow.wf_kit import T0

LIMITS = d.Limits(retention_ms=3_600_000)


@dataclass
class FakeRun:
    """A live run as the scheduler sees it, ended by the test."""

    key: str
    solo: bool = False
    token: str = ""
    ctx: Any = None
    stopping: bool = False
    closed: bool = False
    refused: str | None = None
    after_stop: list[Any] = field(default_factory=list)

    def stop(self, after_stop: list[Any] | None = None) -> None:
        self.stopping = True
        self.after_stop += after_stop or []


class FakeControl:
    """The control fold's answers: one Workflow per Space, with the allocation the test gives it."""

    def __init__(self) -> None:
        self.allocations: dict[str, list[tuple[str, int]]] = {}

    def workflow(self, uid: str) -> WorkflowView:
        return WorkflowView(uid, uid.removeprefix("wf_"), uid, "wkr_1", "Flow", "active")

    def allocation(self, wf: WorkflowView) -> list[tuple[str, int]]:
        return self.allocations.get(wf.uid, [])


class FakeEngine:
    """The scheduler's port: applies a decision as the engine does (fold, then mark runnable)
    and keeps the runs it is asked to start."""

    def __init__(self, contexts: int = 8, per_space: int = 8) -> None:
        settings = Settings(
            "127.0.0.1:1", "postgresql://unused", workflow_contexts=contexts, workflow_contexts_per_space=per_space
        )
        self.table = InstanceTable(LIMITS)
        self.control = FakeControl()
        self.runs: dict[str, FakeRun] = {}
        self.started: list[str] = []
        self.scheduler = Scheduler(settings, LIMITS, self)  # type: ignore[arg-type]

    def apply(self, key: str, decision: d.Decision) -> None:
        for rec in decision.records:
            if isinstance(rec, r.WorkflowRecord):
                self.table.fold(key, rec)
        if decision.runnable:
            self.scheduler.mark(key)

    def start_run(self, key: str, class_name: str, allocation: list[tuple[str, int]], solo: bool) -> None:
        self.runs[key] = FakeRun(key, solo)
        self.started.append(key)

    # ---- what the test does --------------------------------------------------------------------

    def create(self, space: str, iid: str, now: int = T0) -> str:
        uid = f"wf_{space}"
        self.control.allocations.setdefault(uid, [("ver_1", 100)])
        key = f"{uid}/{iid}"
        self.table.fold(key, r.InstanceCreated(uid, iid, space, now))
        self.scheduler.mark(key)
        return key

    def own(self, key: str, now: int) -> FakeRun:
        """The run commits its context start, as a ContextRun does first."""
        run = self.runs[key]
        run.token = f"tok_{key}_{now}"
        self.apply(key, d.start(self.table.instances[key], run.token, "ver_1", now, LIMITS))
        return run

    def end(self, run: FakeRun, outcome: WorkflowOutcome, now: int) -> d.Decision | None:
        """What the engine's `ended` does with the scheduler, minus the terminates."""
        del self.runs[run.key]
        decision, delay = self.scheduler.ended(run, outcome, now)  # type: ignore[arg-type]
        if decision is not None:
            self.apply(run.key, decision)
        self.scheduler.requeue(run.key, delay, now)
        return decision


def test_contexts_are_shared_fairly_among_spaces() -> None:
    # WF-29 (each runnable instance gets a new context), Space isolation (docs/security.md): no Space
    # goes past its share, a busy Space does not go first with all of its instances, and more wait
    engine = FakeEngine(contexts=4, per_space=2)
    busy = [engine.create("a", f"i{n}") for n in range(6)]
    quiet = engine.create("b", "i0")
    engine.scheduler.start_runs(T0)
    assert engine.started == [busy[0], quiet, busy[1]]
    engine.scheduler.start_runs(T0)
    assert len(engine.runs) == 3, "Space a holds its share; the free context is not a's"
    engine.create("c", "i0")
    engine.scheduler.start_runs(T0)
    assert engine.started[-1] == "wf_c/i0" and len(engine.runs) == 4
    engine.end(engine.own(busy[0], T0), WorkflowOutcome("complete"), T0 + 1)
    engine.scheduler.start_runs(T0 + 1)
    assert engine.started[-1] == busy[2] and len(engine.runs) == 4


def test_a_command_that_makes_the_only_runnable_instance_starts_it_at_once() -> None:
    # WF-29, WF-33: a create that leaves nothing else waiting starts its context in the same moment
    # (its context start then commits with the create); with others waiting it leaves the choice to
    # the next step, which shares the contexts fairly, and it never goes past a Space's share
    engine = FakeEngine(contexts=4, per_space=1)
    alone = engine.create("a", "i0")
    engine.scheduler.start_alone(alone, T0)
    assert engine.started == [alone] and not engine.scheduler.runnable
    second = engine.create("a", "i1")
    engine.scheduler.start_alone(second, T0)
    assert engine.started == [alone], "Space a holds its one context"
    other = engine.create("b", "i0")
    engine.scheduler.start_alone(other, T0)
    assert engine.started == [alone], "a's instance waits as well: the step decides between them"
    engine.scheduler.start_runs(T0)
    assert engine.started == [alone, other] and engine.scheduler.runnable == {second}


def test_an_instance_without_a_usable_version_waits_for_the_control_log() -> None:
    # WF-3, WF-7, WF-33: no weighted Version to pick, no context; once the control log gives one
    # the instance runs without anything else waking it
    engine = FakeEngine()
    key = engine.create("a", "i0")
    engine.control.allocations["wf_a"] = []
    engine.scheduler.start_runs(T0)
    assert engine.started == [] and key in engine.scheduler.blocked
    engine.scheduler.start_runs(T0 + 1)
    assert engine.started == []
    engine.control.allocations["wf_a"] = [("ver_2", 100)]
    engine.scheduler.wake.clear()
    engine.scheduler.unblock()
    assert engine.scheduler.wake.is_set()
    engine.scheduler.start_runs(T0 + 2)
    assert engine.started == [key]


def test_a_version_that_left_before_the_context_start_blocks_the_instance() -> None:
    # WF-33: the run found no code for the Version it picked; the instance waits for a usable one
    engine = FakeEngine()
    key = engine.create("a", "i0")
    engine.scheduler.start_runs(T0)
    engine.control.allocations["wf_a"] = []  # the Version left meanwhile
    engine.end(engine.runs[key], WorkflowOutcome("stopped", reason="no_code"), T0 + 1)
    assert key in engine.scheduler.blocked
    engine.scheduler.start_runs(T0 + 2)
    assert engine.started == [key]
    engine.control.allocations["wf_a"] = [("ver_2", 100)]
    engine.scheduler.unblock()
    engine.scheduler.start_runs(T0 + 3)
    assert engine.started == [key, key]


def test_a_runtime_that_did_not_start_is_retried_at_its_time_and_not_before() -> None:
    # WF-41: the next context only after a delay that doubles with each failure in a row
    engine = FakeEngine()
    key = engine.create("a", "i0")
    now = T0
    for delay in (RETRY_FIRST_MS, 2 * RETRY_FIRST_MS, 4 * RETRY_FIRST_MS):
        engine.scheduler.start_runs(now)
        engine.end(engine.runs[key], WorkflowOutcome("stopped", reason=RUNTIME_FAILED), now)
        assert engine.scheduler.next_look() == now + delay
        engine.scheduler.fire(now + delay - 1)
        engine.scheduler.start_runs(now + delay - 1)
        assert key not in engine.runs
        now += delay
        engine.scheduler.fire(now)
    engine.scheduler.start_runs(now)
    assert engine.started == [key] * 4
    run = engine.own(key, now)
    run.ctx = object()  # it started this time: the count in a row starts over
    engine.end(run, WorkflowOutcome("complete"), now)
    assert engine.scheduler.failures == {} and engine.table.instances[key].status == "complete"


def die(engine: FakeEngine, key: str, now: int) -> int | None:
    """One context of the instance, started when due, and dead under a host call the Host
    failed; the delay before the next one (None: there is none)."""
    engine.scheduler.fire(now)
    engine.scheduler.start_runs(now)
    run = engine.own(key, now)
    run.ctx, run.refused = object(), "step.do: backend_unavailable: a bug in the Host"
    engine.end(run, WorkflowOutcome("suspended"), now)  # the runtime gave the run up
    look = engine.scheduler.next_look()
    return None if engine.table.instances[key].terminal or look is None else look - now


def test_the_same_death_at_the_same_step_ends_the_instance_after_a_count_in_a_row() -> None:
    # WF-41, WF-22: a context that dies without the Host asking replays after a growing delay;
    # dying the same way at the same step DEATHS_TO_END times in a row ends it run_threw
    engine = FakeEngine()
    key = engine.create("a", "i0")
    now, delays = T0, []
    for _ in range(DEATHS_TO_END):
        delay = die(engine, key, now)
        delays.append(delay)
        if delay is not None:
            engine.scheduler.fire(now + delay - 1)
            engine.scheduler.start_runs(now + delay - 1)
            assert key not in engine.runs, "not before its delay"
            now += delay
    assert delays == [RETRY_FIRST_MS, 2 * RETRY_FIRST_MS, None]
    assert len(engine.started) == DEATHS_TO_END
    inst = engine.table.instances[key]
    assert inst.status == "errored" and inst.error is not None and inst.error[0] == "run_threw"
    assert f"{DEATHS_TO_END} times in a row" in (inst.error[1] or "") and "a bug in the Host" in (inst.error[1] or "")
    assert engine.scheduler.deaths == {}


def test_progress_between_deaths_starts_the_count_over() -> None:
    # WF-41: only the same attempt dying again counts; a committed attempt in between is progress
    engine = FakeEngine()
    key = engine.create("a", "i0")
    now = T0
    for _ in range(DEATHS_TO_END - 1):
        now += die(engine, key, now) or 0
    step = r.StepAttemptCommitted("wf_a", "i0", "fine", "do", 1, True, True, now, result="{}")
    engine.table.fold(key, step)
    assert die(engine, key, now) == RETRY_FIRST_MS
    assert engine.table.instances[key].status == "running"


def test_a_sleep_wakes_at_its_time_and_gets_a_context() -> None:
    # WF-42: the durable due time fires at its deadline, not before, and the instance runs again
    engine = FakeEngine()
    key = engine.create("a", "i0")
    engine.scheduler.start_runs(T0)
    run = engine.own(key, T0)
    engine.table.fold(key, r.SleepScheduled("wf_a", "i0", "nap", T0 + 5000, run.token, T0))
    run.closed = True  # the sleep's call closed the context, as ContextRun does
    engine.end(run, WorkflowOutcome("suspended"), T0 + 1)
    assert engine.table.instances[key].status == "sleeping"
    assert engine.scheduler.next_look() == T0 + 5000
    engine.scheduler.fire(T0 + 4999)
    engine.scheduler.start_runs(T0 + 4999)
    assert engine.started == [key]
    engine.scheduler.fire(T0 + 5000)
    engine.scheduler.start_runs(T0 + 5000)
    assert engine.started == [key, key]


def test_a_lifetime_that_ends_under_a_live_run_stops_it_first() -> None:
    # WF-38, WF-46: the due time stops the live context; lifetime_exceeded is published only after
    engine = FakeEngine()
    key = engine.create("a", "i0")
    engine.scheduler.start_runs(T0)
    run = engine.own(key, T0)
    end = T0 + LIMITS.lifetime_ms
    engine.scheduler.fire(end)
    assert run.stopping and engine.table.instances[key].status == "running"
    engine.end(run, WorkflowOutcome("stopped", reason="stopped"), end + 1)
    inst = engine.table.instances[key]
    assert inst.status == "errored" and inst.error is not None and inst.error[0] == "lifetime_exceeded"
    engine.scheduler.start_runs(end + 2)
    assert engine.started == [key]
