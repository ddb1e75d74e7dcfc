"""The fold of one workflow instance's log (pure; the engine keeps one per owned instance).

Everything the engine decides from is here and derived from records alone, so a
rebuild from the log restores it exactly, timers included: the due time of a
sleep, a wait timeout, a retry and the retention purge are fields of the fold
(`next_due`), never something held only in an asyncio task.

Statuses (WF-21): `InstanceCreated` means `queued`; every later status is an
`InstanceStatusChanged`. Between a failed attempt and its retry the instance stays
`running` (its run is in progress, no context is alive). A terminal transition
drops the unmatched events (WF-25) and starts the retention period (WF-47).

Bounded memory (issue 17): most instances are terminal and stay until their retention ends,
so a terminal transition also drops what nothing reads of a terminal instance any more — its
params, completed and pending steps, retry configurations and attempts (see `_settle`) — and
the names many instances share (a Workflow's UID, a Space, a Version's UID, a status or an
error reason) are held once (`sys.intern`), not once per instance as the log's decoder makes
them.
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar, assert_never

from sumi.control.rules.forms.durable_workflow import STATUSES
from sumi.core import records as r

TERMINAL = frozenset({"complete", "errored", "terminated"})
K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Step:
    """A completed step (WF-36): replayed with its recorded result, never run again."""

    name: str
    kind: str
    ok: bool
    result: str | None = None  # canonical JSON; None = undefined
    error_name: str | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    sequence: int
    type: str
    payload: str | None
    size: int


@dataclass(frozen=True, slots=True)
class Timer:
    """A pending sleep, wait or retry: what fires, and when (epoch ms)."""

    kind: str  # sleep | wait | retry
    name: str
    due: int
    event_type: str = ""  # wait
    attempt: int = 0  # retry: the attempt that runs next


@dataclass(slots=True)
class Instance:
    workflow_uid: str
    instance_id: str
    space: str = ""
    params: str | None = None
    created_at: int = 0
    status: str = "queued"
    output: str | None = None
    error: tuple[str, str | None] | None = None  # (reason, message)
    owner: str | None = None  # the token of the latest context: only it may commit (WF-14, WF-46)
    contexts: int = 0
    version_uid: str | None = None
    completed: dict[str, Step] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)  # unfinished names seen: name -> kind (WF-35)
    configs: dict[str, str] = field(default_factory=dict)  # unfinished do: the first saved retry configuration (WF-37)
    attempts: dict[str, int] = field(default_factory=dict)  # unfinished do: attempts committed so far
    timer: Timer | None = None
    events: list[Event] = field(default_factory=list)  # unconsumed, in acceptance order (WF-43)
    events_bytes: int = 0
    next_sequence: int = 1
    terminal_at: int | None = None
    purged: bool = False

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def steps_used(self) -> int:
        """Distinct step names begun (WF-38 counts steps, not attempts)."""
        return len(self.completed) + len(self.pending)

    def next_due(self, retention_ms: int) -> int | None:
        if self.purged:
            return None
        if self.terminal_at is not None:
            return self.terminal_at + retention_ms
        return self.timer.due if self.timer is not None else None

    def oldest_event(self, type_: str) -> Event | None:
        return next((e for e in self.events if e.type == type_), None)


# What the instance log holds: the engine's records and each command's answer.
LogRecord = r.WorkflowRecord | r.CommandDecided


def evolve(inst: Instance | None, rec: LogRecord) -> Instance | None:
    """Fold one instance-log record (in place where an instance exists); None = no instance (unknown or purged)."""
    if isinstance(rec, r.InstanceCreated):
        if inst is not None and not inst.purged:
            return inst  # a re-sent create of a retained ID: the first one stands (WF-19)
        return Instance(sys.intern(rec.workflowUid), rec.instanceId, sys.intern(rec.space), rec.params, rec.createdAt)
    if inst is None or inst.purged:
        return inst
    if inst.events is _NO_EVENTS and isinstance(rec, _GROWS):
        _thaw(inst)  # after a terminal status no decision makes one: folded all the same
    match rec:
        case r.InstanceContextStarted():
            _context_started(inst, rec)
        case r.StepAttemptCommitted():
            _step(inst, rec)
        case r.SleepScheduled():
            _sleep(inst, rec)
        case r.WaitScheduled():
            _wait(inst, rec)
        case r.RetryScheduled():
            _retry(inst, rec)
        case r.EventAccepted():
            _event(inst, rec)
        case r.InstanceStatusChanged():
            _status(inst, rec)
        case r.InstancePurged() | r.InstancesPurged():
            inst.purged = True
        case r.CommandDecided():
            pass  # an answer: it changes no instance
        case _:
            assert_never(rec)
    if inst.terminal:
        _settle(inst)
    return inst


def _context_started(inst: Instance, rec: r.InstanceContextStarted) -> None:
    inst.owner, inst.contexts, inst.version_uid = rec.ownerToken, rec.context, sys.intern(rec.versionUid)
    if inst.timer is not None and inst.timer.kind == "retry":
        inst.timer = None  # the retry runs in this context


def _step(inst: Instance, rec: r.StepAttemptCommitted) -> None:
    if rec.eventSequence is not None:
        _consume(inst, rec.eventSequence)
    kind = sys.intern(rec.kind)
    if rec.final:
        # A completed name is replayed, never attempted again: its retry configuration and
        # attempts are read only while it is unfinished (WF-37, WF-40), so they go with it.
        inst.configs.pop(rec.name, None)
        inst.attempts.pop(rec.name, None)
        inst.pending.pop(rec.name, None)
        inst.completed[rec.name] = Step(rec.name, kind, rec.ok, rec.result, rec.errorName, rec.errorMessage)
        if inst.timer is not None and inst.timer.name == rec.name:
            inst.timer = None
        return
    if rec.config is not None:
        inst.configs.setdefault(rec.name, rec.config)
    if rec.kind == "do":
        inst.attempts[rec.name] = rec.attempt
    inst.pending[rec.name] = kind


def _consume(inst: Instance, sequence: int) -> None:
    for i, e in enumerate(inst.events):
        if e.sequence == sequence:
            del inst.events[i]
            inst.events_bytes -= e.size
            return


def _sleep(inst: Instance, rec: r.SleepScheduled) -> None:
    inst.pending[rec.name] = "sleep"
    inst.timer = Timer("sleep", rec.name, rec.deadline)


def _wait(inst: Instance, rec: r.WaitScheduled) -> None:
    inst.pending[rec.name] = "wait"
    # The tie rule (WF-43): an event accepted at the deadline itself still wins, so the
    # timeout fires only after it.
    inst.timer = Timer("wait", rec.name, rec.deadline + 1, rec.eventType)


def _retry(inst: Instance, rec: r.RetryScheduled) -> None:
    inst.pending[rec.name] = "do"
    inst.timer = Timer("retry", rec.name, rec.due, attempt=rec.attempt)


def _event(inst: Instance, rec: r.EventAccepted) -> None:
    inst.next_sequence = max(inst.next_sequence, rec.sequence + 1)
    inst.events.append(Event(rec.sequence, rec.type, rec.payload, rec.size))
    inst.events_bytes += rec.size


def _status(inst: Instance, rec: r.InstanceStatusChanged) -> None:
    inst.status = sys.intern(rec.status)
    if rec.status in TERMINAL:
        inst.output = rec.output
        inst.error = (sys.intern(rec.errorReason), rec.errorMessage) if rec.errorReason is not None else None
        inst.terminal_at = rec.at
        inst.timer, inst.owner = None, None
        inst.events_bytes = 0  # the unmatched events are dropped (WF-25), with the rest (`_settle`)


# What a terminal instance holds instead of its own containers: one empty of each, shared by
# every terminal instance and never written (`_thaw` gives an instance its own before a record
# would write one).
_NO_STEPS: dict[str, Step] = {}
_NO_NAMES: dict[str, str] = {}
_NO_CONFIGS: dict[str, str] = {}
_NO_ATTEMPTS: dict[str, int] = {}
_NO_EVENTS: list[Event] = []
# The records that write an instance's containers.
_GROWS = (r.StepAttemptCommitted, r.SleepScheduled, r.WaitScheduled, r.RetryScheduled, r.EventAccepted)


def _settle(inst: Instance) -> None:
    """Drop what nothing reads of a terminal instance. A terminal instance never runs again, so
    its params, steps, retry configurations and attempts are read by no decision, no context and
    no binding; what is kept answers every question asked of it until its purge: its identity
    and Space (the log key, a binding, metrics), its status, output and error (a binding's
    status(), a terminate's answer, the counts), when it ended (the retention purge) and its
    last context's number and Version. `owner`, `timer` and the events are already cleared by
    the terminal transition itself. Done after every record folded into a terminal instance,
    so the fold holds every terminal instance in this form, whatever its log (a snapshot's
    restore too: `settled`)."""
    inst.params = None
    inst.completed, inst.pending, inst.configs, inst.attempts = _NO_STEPS, _NO_NAMES, _NO_CONFIGS, _NO_ATTEMPTS
    inst.events = _NO_EVENTS


def settled(inst: Instance) -> Instance:
    """An instance restored whole (from a snapshot, perhaps one written before terminal
    instances were settled) in the form the fold of its log holds it."""
    if inst.terminal:
        _settle(inst)
    return inst


def _thaw(inst: Instance) -> None:
    """Own containers in place of the shared empties, before a record writes one."""
    inst.completed = {} if inst.completed is _NO_STEPS else inst.completed
    inst.pending = {} if inst.pending is _NO_NAMES else inst.pending
    inst.configs = {} if inst.configs is _NO_CONFIGS else inst.configs
    inst.attempts = {} if inst.attempts is _NO_ATTEMPTS else inst.attempts
    inst.events = []


def _one_partition(key: str) -> int:
    return 0


@dataclass
class Counts:
    """Instances per status of each Workflow (WF-9), moved by the fold as statuses change, so
    reporting them never recounts every instance. `fold` is `evolve` with the count kept.

    Kept in all and per partition of the instance log: each partition's counts are reported by
    the replica that owns it. Which partition an instance key is in is asked only when a count
    moves (a status change), not for every record: the table hands in the partitioner."""

    per: dict[str, dict[str, int]] = field(default_factory=dict)  # workflow UID -> status -> count > 0
    # workflow UID -> partition -> status -> count > 0
    parts: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)
    partition_of: Callable[[str], int] = field(default=_one_partition, repr=False, compare=False)

    def of(self, workflow_uid: str, partition: int | None = None) -> dict[str, int]:
        """A count for every status: of the Workflow, or of its instances in one partition."""
        if partition is None:
            per = self.per.get(workflow_uid, {})
        else:
            per = self.parts.get(workflow_uid, {}).get(partition, {})
        return {s: per.get(s, 0) for s in STATUSES}

    def add(self, inst: Instance, key: str = "") -> None:
        """An instance restored whole (from a snapshot): counted under its status."""
        if _counted(inst) is not None:
            self._move(inst.workflow_uid, key, None, _counted(inst))

    def fold(self, inst: Instance | None, rec: LogRecord, key: str = "") -> Instance | None:
        before = _counted(inst)  # read first: evolve changes the instance in place
        after = evolve(inst, rec)
        if after is not None and before != _counted(after):
            self._move(after.workflow_uid, key, before, _counted(after))
        return after

    def _move(self, workflow_uid: str, key: str, before: str | None, after: str | None) -> None:
        _shift(self.per, workflow_uid, before, after)  # a deleted Workflow's entry goes with its last instance
        parts = self.parts.setdefault(workflow_uid, {})
        _shift(parts, self.partition_of(key), before, after)
        if not parts:
            del self.parts[workflow_uid]


def _shift(table: dict[K, dict[str, int]], at: K, before: str | None, after: str | None) -> None:
    """One instance moves from status `before` to `after` under `at`; an entry counting
    nothing is dropped."""
    per = table.setdefault(at, {})
    if before is not None:
        per[before] -= 1
        if not per[before]:
            del per[before]
    if after is not None:
        per[after] = per.get(after, 0) + 1
    if not per:
        del table[at]


def _counted(inst: Instance | None) -> str | None:
    """The status an instance is counted under; None: not counted (none, or purged)."""
    return inst.status if inst is not None and not inst.purged else None
