"""The control processor's state: the fold of the control log, per Space and globally."""

import json
from dataclasses import dataclass, field, replace
from typing import Any

from sumi.control.forms import ResourceView
from sumi.core import records as r

TERMINAL = ("succeeded", "failed")


@dataclass
class OperationView:
    id: str
    kind: str
    resource_uid: str
    generation: int
    principal: str
    state: str = "pending"
    # An update remembers the spec it replaced, so that a failed update can put it back.
    previous_spec: dict[str, Any] | None = None


@dataclass
class SpaceState:
    name: str
    exists: bool = False
    resources: dict[str, ResourceView] = field(default_factory=dict)
    operations: dict[str, OperationView] = field(default_factory=dict)
    # (principal, idempotency key) -> (request fingerprint, operation id)
    idempotency: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

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

    def space(self, name: str) -> SpaceState:
        if name not in self.spaces:
            self.spaces[name] = SpaceState(name)
        return self.spaces[name]

    def space_exists(self, name: str) -> bool:
        return name in self.spaces and self.spaces[name].exists


def evolve(state: ControlState, record: Any) -> None:
    """Fold one control record into the state (in place: the state is the processor's own)."""
    handler = _EVOLVERS.get(type(record))
    if handler is not None:
        handler(state, record)


def _space_created(s: ControlState, rec: r.SpaceCreated) -> None:
    s.space(rec.space).exists = True


def _space_deleted(s: ControlState, rec: r.SpaceDeleted) -> None:
    s.spaces[rec.space] = SpaceState(rec.space)


def _resource_created(s: ControlState, rec: r.ResourceCreated) -> None:
    s.space(rec.space).resources[rec.uid] = ResourceView(
        rec.uid, rec.name, rec.form, json.loads(rec.spec), "creating", rec.generation
    )


def _resource_updated(s: ControlState, rec: r.ResourceUpdated) -> None:
    sp = s.space(rec.space)
    old = sp.resources[rec.uid]
    op = sp.operations.get(rec.operationId)
    if op is not None and op.previous_spec is None:
        op.previous_spec = dict(old.spec)
    sp.resources[rec.uid] = replace(old, spec=json.loads(rec.spec), generation=rec.generation)


def _resource_state(s: ControlState, rec: r.ResourceStateChanged) -> None:
    sp = s.space(rec.space)
    sp.resources[rec.uid] = replace(sp.resources[rec.uid], state=rec.state)


def _resource_observed(s: ControlState, rec: r.ResourceObserved) -> None:
    sp = s.space(rec.space)
    if rec.uid in sp.resources:
        sp.resources[rec.uid] = replace(sp.resources[rec.uid], observed=json.loads(rec.observed))


def _resource_deleted(s: ControlState, rec: r.ResourceDeleted) -> None:
    s.space(rec.space).resources.pop(rec.uid, None)


def _operation_started(s: ControlState, rec: r.OperationStarted) -> None:
    s.space(rec.space).operations[rec.id] = OperationView(
        rec.id, rec.kind, rec.resourceUid, rec.generation, rec.principal
    )


def _operation_state(s: ControlState, rec: r.OperationStateChanged) -> None:
    op = s.space(rec.space).operations.get(rec.id)
    if op is not None:
        op.state = rec.state
        if rec.state in TERMINAL:
            op.previous_spec = None


def _command_decided(s: ControlState, rec: r.CommandDecided) -> None:
    if rec.accepted and rec.idempotencyKey and rec.operationId and rec.fingerprint:
        s.space(rec.space).idempotency[(rec.principal, rec.idempotencyKey)] = (rec.fingerprint, rec.operationId)


_EVOLVERS: dict[type, Any] = {
    r.SpaceCreated: _space_created,
    r.SpaceDeleted: _space_deleted,
    r.ResourceCreated: _resource_created,
    r.ResourceUpdated: _resource_updated,
    r.ResourceStateChanged: _resource_state,
    r.ResourceObserved: _resource_observed,
    r.ResourceDeleted: _resource_deleted,
    r.OperationStarted: _operation_started,
    r.OperationStateChanged: _operation_state,
    r.CommandDecided: _command_decided,
}
