"""Typed workflow commands: one frozen msgspec Struct per kind, decoded once at the engine's edge.

On the wire a command is a `CommandSubmitted` on `<prefix>.workflow.commands`, keyed by
the instance key `<workflowUid>/<instanceId>` (sumi.wire.topics.instance_key), with
`kind` one of `KINDS` and `payload` the canonical JSON of the Struct (`payload()`). The
gateway (§5 HTTP) and the engines (worker bindings, WF-18) build commands with these
classes and `submitted()`; the engine decodes them with `decode()`; the decision is a
`CommandDecided` on the instance log whose `result` is the HTTP answer body.

Decoding checks shape, exact JSON types and the name limits (WF-19, WF-23) in one pass,
like the control commands (sumi.core.commands, whose helpers these reuse); a bad
payload is `invalid_request`. Documents (`params`, an event's `payload`) carry their own
codes (DOC-1..6: `invalid_params`, `document_too_large`), so their types check them in
`__post_init__`, which runs both on decoding and on construction. An absent document is
`UNSET`, never None: a JSON null is present, and not a document (DOC-5).

The instance ID is part of the key, so the submitter issues it when the caller omitted
one (`CreateInstance.new`); `issued` records that, for the answer only.
"""

from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from sumi.core.commands import Kinds, TypedCommand, payload, submitted
from sumi.core.ids import new_ulid
from sumi.core.problems import Problem
from sumi.wire.topics import instance_key
from sumi.workflow._documents import MAX_NAME_LENGTH, document_json, is_name

__all__ = [
    "UNSET",
    "CreateInstance",
    "QueryInstance",
    "SendEvent",
    "TerminateInstance",
    "WorkflowCommand",
    "KINDS",
    "convert",
    "decode",
    "key_of",
    "payload",
    "submitted",
]

# 1..256 Unicode scalar values (WF-19, WF-23): lengths here, lone surrogates in __post_init__.
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
Document = Any | UnsetType  # a JSON object, checked in __post_init__; UNSET when absent


class _WorkflowCommand(TypedCommand, frozen=True, rename={"workflow_uid": "workflowUid", "instance_id": "id"}):
    workflow_uid: Annotated[str, msgspec.Meta(min_length=1)]
    instance_id: Name

    def __post_init__(self) -> None:
        _scalar_values(self.instance_id, "id")


class CreateInstance(_WorkflowCommand, frozen=True):
    """`instance.create` → 201 `{"id", "status"}` | instance_exists | invalid_params | document_too_large |
    workflow_not_ready | not_found."""

    kind: ClassVar[str] = "instance.create"
    params: Document = UNSET
    issued: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.params is not UNSET:
            document_json(self.params, "params")

    @classmethod
    def new(cls, workflow_uid: str, instance_id: str | None = None, params: Document = UNSET) -> "CreateInstance":
        if instance_id is None:
            return cls(workflow_uid, f"wfi_{new_ulid()}", params, issued=True)
        return cls(workflow_uid, instance_id, params)


class SendEvent(_WorkflowCommand, frozen=True):
    """`instance.event` → 202 `{"sequence": n}` | unknown_instance | instance_terminal | event_queue_full | …"""

    kind: ClassVar[str] = "instance.event"
    type: Name
    payload: Document = UNSET

    def __post_init__(self) -> None:
        super().__post_init__()
        _scalar_values(self.type, "type")
        if self.payload is not UNSET:
            document_json(self.payload, "payload")


class TerminateInstance(_WorkflowCommand, frozen=True):
    """`instance.terminate` → 200 `{"id", "status"}`, decided only after the context physically stopped (WF-26)."""

    kind: ClassVar[str] = "instance.terminate"


class QueryInstance(_WorkflowCommand, frozen=True, rename={"reply_key": "replyKey"}):
    """`instance.status` → 200, the status document (WF-21) sealed under `reply_key` | unknown_instance.

    Never from the gateway (it reads the read side): a Caller Binding's `get`/`status()` of an
    instance another replica decides, asked of its owner. The answer goes to the instance log,
    where documents go sealed; `reply_key` (base64url of 32 random bytes) is the asker's one-time
    key, held by it in memory and otherwise only on this command, which leaves
    `workflow.commands` once decided, as a create's params do."""

    kind: ClassVar[str] = "instance.status"
    reply_key: Annotated[str, msgspec.Meta(min_length=44, max_length=44)]


def _scalar_values(name: str, what: str) -> None:
    """The JSON decoder refuses a lone surrogate itself; a command converted from a value
    another parser produced (a runtime's frame: Kinds.convert) is checked here."""
    if not is_name(name):
        raise Problem("invalid_request", f"{what} must be 1..256 Unicode scalar values")


WorkflowCommand = CreateInstance | SendEvent | TerminateInstance | QueryInstance
_KINDS: Kinds[WorkflowCommand] = Kinds("workflow command", CreateInstance, SendEvent, TerminateInstance, QueryInstance)
KINDS = _KINDS.types
decode = _KINDS.decode
convert = _KINDS.convert


def key_of(command: WorkflowCommand) -> str:
    return instance_key(command.workflow_uid, command.instance_id)
