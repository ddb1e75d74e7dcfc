"""Typed workflow commands: one frozen dataclass per kind, decoded once at the engine's edge.

On the wire a command is a `CommandSubmitted` on `<prefix>.workflow.commands`, keyed by
the instance key `<workflowUid>/<instanceId>` (sumi.core.topics.instance_key), with
`kind` one of `KINDS` and `payload` the canonical JSON of `payload_of(command)`. The
gateway (§5 HTTP) and the engines (worker bindings, WF-18) build commands with these
classes and `submitted()`; the engine decodes them with `decode()`; the decision is a
`CommandDecided` on the instance log whose `result` is the HTTP answer body.

The instance ID is part of the key, so the submitter issues it when the caller omitted
one (`CreateInstance.new`); `issued` records that, for the answer only.
"""

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from sumi.core import records as r
from sumi.core.canonical import canonical
from sumi.core.ids import new_ulid
from sumi.core.problems import Problem
from sumi.core.topics import instance_key
from sumi.workflow._documents import document_json, is_name


@dataclass(frozen=True)
class CreateInstance:
    """`instance.create` → 201 `{"id", "status"}` | instance_exists | invalid_params | document_too_large |
    workflow_not_ready | not_found."""

    kind: ClassVar[str] = "instance.create"
    workflow_uid: str
    instance_id: str
    params: Any | None = None  # a document; None only when absent (DOC-5)
    issued: bool = False

    @classmethod
    def new(cls, workflow_uid: str, instance_id: str | None = None, params: Any | None = None) -> "CreateInstance":
        if instance_id is None:
            return cls(workflow_uid, f"wfi_{new_ulid()}", params, issued=True)
        return cls(workflow_uid, instance_id, params)


@dataclass(frozen=True)
class SendEvent:
    """`instance.event` → 202 `{"sequence": n}` | unknown_instance | instance_terminal | event_queue_full | …"""

    kind: ClassVar[str] = "instance.event"
    workflow_uid: str
    instance_id: str
    type: str
    payload: Any | None = None


@dataclass(frozen=True)
class TerminateInstance:
    """`instance.terminate` → 200 `{"id", "status"}`, decided only after the context physically stopped (WF-26)."""

    kind: ClassVar[str] = "instance.terminate"
    workflow_uid: str
    instance_id: str


WorkflowCommand = CreateInstance | SendEvent | TerminateInstance
KINDS = {c.kind: c for c in (CreateInstance, SendEvent, TerminateInstance)}


def key_of(command: WorkflowCommand) -> str:
    return instance_key(command.workflow_uid, command.instance_id)


def payload_of(command: WorkflowCommand) -> dict[str, Any]:
    """The JSON payload in the contract's names; optional documents absent when None."""
    body: dict[str, Any] = {"workflowUid": command.workflow_uid, "id": command.instance_id}
    if isinstance(command, CreateInstance):
        if command.params is not None:
            body["params"] = command.params
        if command.issued:
            body["issued"] = True
    elif isinstance(command, SendEvent):
        body["type"] = command.type
        if command.payload is not None:
            body["payload"] = command.payload
    return body


def submitted(
    command: WorkflowCommand,
    *,
    command_id: str,
    space: str,
    principal: str,
    now: int,
    admin: bool = False,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
) -> r.CommandSubmitted:
    """The record to append to `<prefix>.workflow.commands` under `key_of(command)`."""
    return r.CommandSubmitted(
        command_id,
        command.kind,
        space,
        principal,
        admin,
        canonical(payload_of(command)),
        now,
        idempotency_key,
        fingerprint,
    )


_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    CreateInstance.kind: ({"workflowUid", "id"}, {"params", "issued"}),
    SendEvent.kind: ({"workflowUid", "id", "type"}, {"payload"}),
    TerminateInstance.kind: ({"workflowUid", "id"}, set()),
}


def decode(kind: str, payload: str) -> WorkflowCommand:
    """The typed command, or a Problem naming what is wrong (nothing is decided on bad input)."""
    if kind not in _FIELDS:
        raise Problem("invalid_request", f"unknown workflow command kind {kind!r}")
    try:
        body = json.loads(payload)
    except ValueError:
        raise Problem("invalid_request", "the command payload is not JSON") from None
    required, optional = _FIELDS[kind]
    if not isinstance(body, dict) or not required <= body.keys() or body.keys() - required - optional:
        raise Problem("invalid_request", f"{kind} takes {sorted(required)} and optionally {sorted(optional)}")
    if not isinstance(body["workflowUid"], str) or not body["workflowUid"]:
        raise Problem("invalid_request", "workflowUid must be a non-empty string")
    if not is_name(body["id"]):
        raise Problem("invalid_request", "id must be 1..256 Unicode scalar values (WF-19)")
    if kind == CreateInstance.kind:
        if "params" in body:
            document_json(body["params"], "params")  # null is not "absent" (DOC-5)
        return CreateInstance(body["workflowUid"], body["id"], body.get("params"), body.get("issued") is True)
    if kind == SendEvent.kind:
        if not is_name(body["type"]):
            raise Problem("invalid_request", "type must be 1..256 Unicode scalar values (WF-23)")
        if "payload" in body:
            document_json(body["payload"], "payload")
        return SendEvent(body["workflowUid"], body["id"], body["type"], body.get("payload"))
    return TerminateInstance(body["workflowUid"], body["id"])
