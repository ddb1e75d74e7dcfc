"""Every command the control processor decides, one frozen type per kind.

A `CommandSubmitted` record carries its command as `kind` plus a JSON `payload`.
The payload is decoded and validated here, once, into the type of its kind
(closed objects, exact JSON types: an integer is not a boolean, a string is not a
number); the decisions then read typed fields only. A payload that does not decode
(not JSON, a wrong shape or type, an unknown kind) is a `Problem invalid_request`,
which the processor answers as a rejected decision: it never stops the processor.

The types are msgspec Structs (frozen, like the records' dataclasses): the library
decodes and validates the JSON in one pass. Field names are snake_case here and
camelCase in the payload (`rename="camel"`), as the log has always written them.
Writers (gateway, engines, verifier, bootstrap) build the typed command and turn it
into the record with `submitted`, so every payload on the log is written one way.
"""

from typing import Any, ClassVar, Generic, Literal, TypeVar

import msgspec

from sumi.core import records as r
from sumi.core.canonical import parsed_canonical
from sumi.core.problems import Problem


class TypedCommand(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A command of any log (control, workflow): its `kind` names it on the record, its fields are the payload."""

    kind: ClassVar[str]


C = TypeVar("C", bound=TypedCommand)


class Kinds(Generic[C]):
    """The command types of one log by kind, each with its decoder (built once)."""

    def __init__(self, what: str, *types: type[C]) -> None:
        self.what = what
        self.types: dict[str, type[C]] = {t.kind: t for t in types}
        self._decoders = {t.kind: msgspec.json.Decoder(t) for t in types}

    def decode(self, kind: str, payload: str) -> C:
        """The typed command of a record, or `Problem invalid_request` saying what is wrong.

        A `Problem` a type raises itself (its `__post_init__`, e.g. a document's own code)
        passes through unchanged."""
        decoder = self._decoders.get(kind)
        if decoder is None:
            raise Problem("invalid_request", f"unknown {self.what} kind {kind!r}")
        try:
            command: C = decoder.decode(payload)
        except (msgspec.DecodeError, UnicodeError) as exc:  # ValidationError included: shape and types
            raise Problem("invalid_request", f"the {kind} payload does not decode: {exc}") from None
        return command

    def convert(self, kind: str, value: dict[str, Any]) -> C:
        """`decode` for a value already parsed from JSON (a runtime's frame), without writing it
        out and reading it back (a 1 MiB document costs tens of ms). The JSON decoder's own
        refusal of lone surrogates is not made here: a type whose strings must be Unicode
        scalar values checks them in its `__post_init__`, as the workflow commands do."""
        try:
            command: C = msgspec.convert(value, self.types[kind])
        except msgspec.ValidationError as exc:
            raise Problem("invalid_request", f"the {kind} payload does not decode: {exc}") from None
        return command


class _Command(TypedCommand, frozen=True, kw_only=True, rename="camel"):
    pass


class SpaceCreate(_Command, frozen=True):
    kind: ClassVar[str] = "space.create"
    name: str


class SpaceDelete(_Command, frozen=True):
    kind: ClassVar[str] = "space.delete"
    name: str


Role = Literal["viewer", "editor"]


class Grant(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    space: str
    role: Role


class TokenCreate(_Command, frozen=True):
    kind: ClassVar[str] = "token.create"
    principal: str
    token_hash: str
    admin: bool = False
    grants: tuple[Grant, ...] = ()


class TokenRevoke(_Command, frozen=True):
    kind: ClassVar[str] = "token.revoke"
    principal: str


class ResourceCreate(_Command, frozen=True):
    kind: ClassVar[str] = "resource.create"
    name: str
    form: str
    spec: dict[str, Any]  # the Form judges its shape (invalid_spec), not the command
    private_inputs: dict[str, Any] | None = None


class ResourceUpdate(_Command, frozen=True):
    kind: ClassVar[str] = "resource.update"
    ref: str  # a UID or a name
    spec: dict[str, Any]
    private_inputs: dict[str, Any] | None = None


class ResourceDelete(_Command, frozen=True):
    kind: ClassVar[str] = "resource.delete"
    ref: str


class OperationApply(_Command, frozen=True):
    """The processor's own follow-up: carry an accepted Operation out (QC-48)."""

    kind: ClassVar[str] = "operation.apply"
    operation_id: str


Outcome = Literal["succeeded", "failed", "reconciling"]
Effect = Literal["none", "partial", "complete", "unknown"]


class OperationReport(_Command, frozen=True):
    """A service that owns an Operation's outside effect reports how it ended (or that it reconciles).

    With `partition` (of `partitions`) it reports one partition's share done: the owners of the
    instance log's partitions each carry out theirs (a Workflow's delete, WF-13), and the
    Operation succeeds once every partition's has. Payloads written before parts existed decode
    as whole reports."""

    kind: ClassVar[str] = "operation.report"
    operation_id: str
    outcome: Outcome
    effect: Effect | None = None
    observed: dict[str, Any] | None = None  # None: nothing observed to record
    error: dict[str, Any] | None = None  # a Problem's JSON
    partition: int | None = None
    partitions: int | None = None

    def __post_init__(self) -> None:
        if (self.partition is None) != (self.partitions is None):
            raise Problem("invalid_request", "a part's report names its partition and how many there are")
        if self.partition is not None and self.outcome != "succeeded":
            raise Problem("invalid_request", "a part is reported done (succeeded); the Operation itself reconciles")
        _check_partition(self.partition, self.partitions)


class ResourceObserve(_Command, frozen=True):
    """The Host's last confirmed observation of a Resource (QC-35, WF-9).

    With `partition`, a DurableWorkflow's instance counts of that partition of the instance
    log, from the engine that owns it: the control plane keeps each partition's latest and
    observes their sum."""

    kind: ClassVar[str] = "resource.observe"
    uid: str
    observed: dict[str, Any]
    partition: int | None = None

    def __post_init__(self) -> None:
        _check_partition(self.partition, None)


def _check_partition(partition: int | None, partitions: int | None) -> None:
    if partition is not None and (partition < 0 or (partitions is not None and partition >= partitions)):
        raise Problem("invalid_request", f"partition {partition} is not one of the instance log's")


Command = (
    SpaceCreate
    | SpaceDelete
    | TokenCreate
    | TokenRevoke
    | ResourceCreate
    | ResourceUpdate
    | ResourceDelete
    | OperationApply
    | OperationReport
    | ResourceObserve
)

_KINDS: Kinds[Command] = Kinds(
    "command",
    SpaceCreate,
    SpaceDelete,
    TokenCreate,
    TokenRevoke,
    ResourceCreate,
    ResourceUpdate,
    ResourceDelete,
    OperationApply,
    OperationReport,
    ResourceObserve,
)
KINDS = _KINDS.types
decode = _KINDS.decode


def payload(command: TypedCommand) -> str:
    """The command's payload as it goes on the log: canonical JSON (RFC 8785)."""
    return parsed_canonical(msgspec.to_builtins(command))


def submitted(
    command: TypedCommand,
    *,
    command_id: str,
    space: str,
    principal: str,
    now: int,
    admin: bool = False,
    idempotency_key: str | None = None,
    fingerprint: str | None = None,
) -> r.CommandSubmitted:
    """The record that carries `command` on the commands topic."""
    return r.CommandSubmitted(
        commandId=command_id,
        kind=command.kind,
        space=space,
        principal=principal,
        admin=admin,
        payload=payload(command),
        submittedAt=now,
        idempotencyKey=idempotency_key,
        fingerprint=fingerprint,
    )
