"""The one fold of the control log: every Space's Resources and Operations.

Public, and the only place the control records are folded. The control processor
decides on it (per assigned partition); the queue engine and the verifier fold the
same records into the same state and ask it questions (the queries at the end of
this module); the workflow engine is meant to do the same. A rule of the log's
meaning, such as "a Deployment update takes effect when it succeeds", is therefore
coded once, here or in the Form that owns it, and every reader sees it alike.

Pure: no I/O. `evolve` changes the state in place, because each state belongs to
the one process that folds it.
"""

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sumi.control.rules.forms import ResourceView
from sumi.control.rules.forms.names import DURABLE_WORKFLOW, MODULE_WORKER, WORKER_VERSION
from sumi.control.rules.forms.worker_deployment import active_allocation
from sumi.control.rules.forms.worker_version import worker_of
from sumi.core import records as r

TERMINAL = ("succeeded", "failed")
# The states in which a Resource serves: an update in progress keeps serving what is in force.
LIVE = ("active", "updating")


@dataclass
class OperationView:
    id: str
    kind: str
    resource_uid: str
    generation: int
    principal: str
    state: str = "pending"
    # An update remembers the spec it replaced: until the update succeeds that spec is the one
    # in force (a Deployment's allocation), and a failed update puts it back.
    previous_spec: dict[str, Any] | None = None
    # The partitions of the instance log whose share of the Operation is done, for one carried
    # out per partition (a Workflow's delete, WF-13). A frozenset: a decision's scratch copy of
    # the Operation (`replace`) folds into its own, never into this one.
    parts_done: frozenset[int] = frozenset()


@dataclass
class SpaceState:
    name: str
    exists: bool = False
    resources: dict[str, ResourceView] = field(default_factory=dict)
    operations: dict[str, OperationView] = field(default_factory=dict)
    # (principal, idempotency key) -> (request fingerprint, operation id)
    idempotency: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    # DurableWorkflow UID -> partition of the instance log -> status -> count, as its engine last
    # reported (WF-9); a partition that counts nothing is absent. Observed shows only the sum.
    instance_counts: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)

    # Registry protocol, as the Forms see it.
    def get(self, uid: str) -> ResourceView | None:
        return self.resources.get(uid)

    def all(self) -> list[ResourceView]:
        return list(self.resources.values())

    def by_ref(self, ref: str) -> ResourceView | None:
        if "_" in ref:  # a UID always holds an underscore, a name never does
            return self.resources.get(ref)
        return next((res for res in self.resources.values() if res.name == ref), None)

    def unfinished_operation(self, uid: str) -> OperationView | None:
        return next(
            (op for op in self.operations.values() if op.resource_uid == uid and op.state not in TERMINAL), None
        )


@dataclass
class ControlState:
    spaces: dict[str, SpaceState] = field(default_factory=dict)
    # Resource UIDs are unique across Spaces: readers that see every Space look them up here.
    located: dict[str, str] = field(default_factory=dict)  # uid -> Space
    deleted: dict[str, str] = field(default_factory=dict)  # uid -> Form of every Resource deleted

    def space(self, name: str) -> SpaceState:
        if name not in self.spaces:
            self.spaces[name] = SpaceState(name)
        return self.spaces[name]

    def space_exists(self, name: str) -> bool:
        return name in self.spaces and self.spaces[name].exists

    def space_of(self, uid: str) -> SpaceState | None:
        """The Space that holds the live Resource `uid`."""
        name = self.located.get(uid)
        return self.spaces.get(name) if name is not None else None

    def resource(self, uid: str) -> ResourceView | None:
        space = self.space_of(uid)
        return space.resources.get(uid) if space is not None else None

    def resources(self, form: str | None = None) -> Iterator[tuple[SpaceState, ResourceView]]:
        """Every live Resource (of one Form), with its Space."""
        for space in self.spaces.values():
            for res in space.resources.values():
                if form is None or res.form == form:
                    yield space, res


def evolve(state: ControlState, record: r.Record) -> None:
    """Fold one record into the state (records that are not control records change nothing)."""
    match record:
        case r.SpaceCreated():
            state.space(record.space).exists = True
        case r.SpaceDeleted():
            # The processor never deletes a Space that holds Resources; a reader stays right anyway.
            for uid, res in state.space(record.space).resources.items():
                _forget(state, uid, res.form)
            state.spaces[record.space] = SpaceState(record.space)
        case r.ResourceCreated():
            state.space(record.space).resources[record.uid] = ResourceView(
                record.uid, record.name, record.form, json.loads(record.spec), "creating", record.generation
            )
            state.located[record.uid] = record.space
        case r.ResourceUpdated():
            space = state.space(record.space)
            old = space.resources[record.uid]
            op = space.operations.get(record.operationId)
            if op is not None and op.previous_spec is None:
                op.previous_spec = dict(old.spec)
            space.resources[record.uid] = replace(old, spec=json.loads(record.spec), generation=record.generation)
        case r.ResourceStateChanged():
            space = state.space(record.space)
            space.resources[record.uid] = replace(space.resources[record.uid], state=record.state)
        case r.ResourceObserved():
            space = state.space(record.space)
            if record.uid in space.resources:
                space.resources[record.uid] = replace(space.resources[record.uid], observed=json.loads(record.observed))
        case r.InstanceCountsObserved():
            _count_part(state.space(record.space), record)
        case r.ResourceDeleted():
            state.space(record.space).instance_counts.pop(record.uid, None)
            gone = state.space(record.space).resources.pop(record.uid, None)
            if gone is not None:
                _forget(state, record.uid, gone.form)
        case r.OperationStarted():
            state.space(record.space).operations[record.id] = OperationView(
                record.id, record.kind, record.resourceUid, record.generation, record.principal
            )
        case r.OperationStateChanged():
            op = state.space(record.space).operations.get(record.id)
            if op is not None:
                op.state = record.state
                if record.state in TERMINAL:
                    op.previous_spec = None
                    op.parts_done = frozenset()
        case r.OperationPartSucceeded():
            op = state.space(record.space).operations.get(record.id)
            if op is not None and op.state not in TERMINAL:
                op.parts_done = op.parts_done | {record.partition}
        case r.CommandDecided():
            if record.accepted and record.idempotencyKey and record.operationId and record.fingerprint:
                key = (record.principal, record.idempotencyKey)
                state.space(record.space).idempotency[key] = (record.fingerprint, record.operationId)
        case _:
            pass


def _count_part(space: SpaceState, record: r.InstanceCountsObserved) -> None:
    if record.uid not in space.resources:
        return
    parts = space.instance_counts.setdefault(record.uid, {})
    if any(record.counts.values()):
        parts[record.partition] = dict(record.counts)
    else:
        parts.pop(record.partition, None)
        if not parts:
            del space.instance_counts[record.uid]


def _forget(state: ControlState, uid: str, form: str) -> None:
    state.located.pop(uid, None)
    state.deleted[uid] = form


# ---- questions the services ask ----------------------------------------------------------------


def serving_allocation(state: ControlState, worker_uid: str) -> list[tuple[str, int]]:
    """The worker's allocation in force, restricted to Versions that can serve (their Resource is
    live): [(version uid, percentage)]; empty when nothing can serve (deliveries pause)."""
    space = state.space_of(worker_uid)
    if space is None:
        return []
    out = []
    for uid, percentage in active_allocation(space, worker_uid) or []:
        version = space.resources.get(uid)
        if version is not None and version.form == WORKER_VERSION and version.state in LIVE:
            out.append((uid, int(percentage)))
    return out


@dataclass(frozen=True)
class VersionView:
    """One WorkerVersion as a runtime loads it, with what the verifier observed of it."""

    uid: str
    space: str
    worker: str
    runtime: str  # the worker's: "javascript" | "python"
    main_module: str
    modules: tuple[tuple[str, str], ...]  # (name, content)
    vars: dict[str, str]
    queue_bindings: dict[str, str]  # binding name -> queue uid
    workflow_bindings: dict[str, str]  # binding name -> DurableWorkflow uid
    verified: bool
    handlers: tuple[str, ...]
    workflow_classes: tuple[str, ...]
    state: str


def version(state: ControlState, uid: str) -> VersionView | None:
    """The live Version `uid` with its live worker, else None."""
    space = state.space_of(uid)
    v = space.resources.get(uid) if space is not None else None
    if space is None or v is None or v.form != WORKER_VERSION:
        return None
    worker = space.resources.get(str(worker_of(v.spec)))
    if worker is None or worker.form != MODULE_WORKER:
        return None
    s, seen = v.spec, v.observed
    return VersionView(
        uid=v.uid,
        space=space.name,
        worker=worker.uid,
        runtime=str(worker.spec.get("runtime", "javascript")),
        main_module=s["mainModule"],
        modules=tuple((m["name"], m["content"]) for m in s["modules"]),
        vars={k: str(x) for k, x in (s.get("vars") or {}).items()},
        queue_bindings=_bindings(s.get("queueBindings"), "queue"),
        workflow_bindings=_bindings(s.get("workflowBindings"), "resource"),
        verified=seen.get("verified") is True and not seen.get("loadError"),
        handlers=tuple(seen.get("handlers") or ()),
        workflow_classes=tuple(seen.get("workflowClasses") or ()),
        state=v.state,
    )


def _bindings(entries: Any, target: str) -> dict[str, str]:
    return {b["name"]: b[target]["resourceUid"] for b in entries or []}


@dataclass(frozen=True)
class WorkflowView:
    """One DurableWorkflow: the worker that runs it and the class its instances are."""

    uid: str
    space: str
    name: str
    worker: str | None
    class_name: str | None
    state: str


def workflows(state: ControlState, space: str | None = None) -> list[WorkflowView]:
    """The live DurableWorkflows of one Space (or of every Space)."""
    return [
        WorkflowView(res.uid, sp.name, res.name, worker_of(res.spec), _str_or_none(res.spec, "className"), res.state)
        for sp, res in state.resources(DURABLE_WORKFLOW)
        if space is None or sp.name == space
    ]


def _str_or_none(spec: Mapping[str, object], key: str) -> str | None:
    value = spec.get(key)
    return value if isinstance(value, str) else None
