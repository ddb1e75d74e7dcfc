"""Every record type that goes on a topic, one frozen dataclass per Avro schema.

The schema in `schemas/<Name>.avsc` is the definition; these classes mirror it
field for field (a unit test holds them together). Timestamps are UTC epoch
milliseconds. JSON-valued fields carry documents (specs, Problems) that are
opaque to the log's schema by design.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CommandSubmitted:
    commandId: str
    kind: str
    space: str
    principal: str
    admin: bool
    payload: str
    submittedAt: int
    idempotencyKey: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class CommandDecided:
    commandId: str
    space: str
    principal: str
    kind: str
    accepted: bool
    status: int
    decidedAt: int
    operationId: str | None = None
    problem: str | None = None
    result: str | None = None
    idempotencyKey: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class SpaceCreated:
    space: str
    createdAt: int


@dataclass(frozen=True)
class SpaceDeleted:
    space: str
    deletedAt: int


@dataclass(frozen=True)
class TokenIssued:
    principal: str
    tokenHash: str
    admin: bool
    issuedAt: int
    grants: tuple[dict[str, str], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class TokensRevoked:
    principal: str
    revokedAt: int


@dataclass(frozen=True)
class ResourceCreated:
    uid: str
    space: str
    name: str
    form: str
    spec: str
    generation: int
    operationId: str
    createdAt: int


@dataclass(frozen=True)
class ResourceUpdated:
    uid: str
    space: str
    spec: str
    generation: int
    operationId: str
    updatedAt: int


@dataclass(frozen=True)
class ResourceStateChanged:
    uid: str
    space: str
    state: str
    at: int


@dataclass(frozen=True)
class ResourceObserved:
    uid: str
    space: str
    observed: str
    at: int


@dataclass(frozen=True)
class ResourceDeleted:
    uid: str
    space: str
    operationId: str
    deletedAt: int


@dataclass(frozen=True)
class OperationStarted:
    id: str
    kind: str
    space: str
    resourceUid: str
    generation: int
    principal: str
    createdAt: int


@dataclass(frozen=True)
class OperationStateChanged:
    id: str
    space: str
    state: str
    effect: str
    at: int
    error: str | None = None


@dataclass(frozen=True)
class OperationPartSucceeded:
    id: str
    space: str
    partition: int  # of the instance log: each owner of one carries out its share (WF-13)
    at: int


@dataclass(frozen=True)
class InstanceCountsObserved:
    uid: str
    space: str
    partition: int  # of the instance log; the Resource's observed counts are the sum (WF-9)
    counts: dict[str, int]
    at: int


@dataclass(frozen=True)
class MessageAccepted:
    queueUid: str
    space: str
    messageId: str
    body: bytes
    acceptedAt: int
    visibleAt: int
    principal: str | None = None
    idempotencyKey: str | None = None


def _tuples(record: object, *names: str) -> None:
    # Avro arrays decode as lists; the records hold tuples so they stay hashable and comparable.
    for name in names:
        object.__setattr__(record, name, tuple(getattr(record, name)))


@dataclass(frozen=True)
class BatchDelivered:
    queueUid: str
    consumerUid: str
    batchId: str
    messageIds: tuple[str, ...]
    attempts: tuple[int, ...]
    versionUid: str
    at: int

    def __post_init__(self) -> None:
        _tuples(self, "messageIds", "attempts")


@dataclass(frozen=True)
class MessagesAcknowledged:
    queueUid: str
    batchId: str
    messageIds: tuple[str, ...]
    cause: str
    at: int

    def __post_init__(self) -> None:
        _tuples(self, "messageIds")


@dataclass(frozen=True)
class MessageRetryScheduled:
    queueUid: str
    messageId: str
    visibleAt: int
    attempt: int
    cause: str
    at: int
    batchId: str | None = None


@dataclass(frozen=True)
class MessageDeadLettered:
    queueUid: str
    messageId: str
    deadLetterQueueUid: str
    newMessageId: str
    at: int
    batchId: str | None = None


@dataclass(frozen=True)
class MessageDiscarded:
    queueUid: str
    messageId: str
    reason: str
    at: int


@dataclass(frozen=True)
class BatchEnded:
    queueUid: str
    consumerUid: str
    batchId: str
    outcome: str
    at: int
    error: str | None = None


@dataclass(frozen=True)
class QueuePurged:
    queueUid: str
    at: int


# ---- the workflow instance log (<prefix>.workflow, key <workflowUid>/<instanceId>) ----------------
# Documents (params, results, payloads, output, error messages) travel as canonical JSON strings,
# sealed with a data key (`sumi.core.sealing`) by the engine; null = absent (DOC-5).


@dataclass(frozen=True)
class InstanceCreated:
    workflowUid: str
    instanceId: str
    space: str
    createdAt: int
    params: str | None = None
    principal: str | None = None


@dataclass(frozen=True)
class InstanceContextStarted:
    workflowUid: str
    instanceId: str
    ownerToken: str
    versionUid: str
    context: int
    at: int


@dataclass(frozen=True)
class StepAttemptCommitted:
    workflowUid: str
    instanceId: str
    name: str
    kind: str  # do | sleep | wait
    attempt: int
    ok: bool
    final: bool
    at: int
    result: str | None = None
    errorName: str | None = None
    errorMessage: str | None = None
    config: str | None = None
    eventSequence: int | None = None
    ownerToken: str | None = None  # None: committed by the engine's timer (a sleep or wait deadline)


@dataclass(frozen=True)
class SleepScheduled:
    workflowUid: str
    instanceId: str
    name: str
    deadline: int
    ownerToken: str
    at: int


@dataclass(frozen=True)
class WaitScheduled:
    workflowUid: str
    instanceId: str
    name: str
    eventType: str
    deadline: int
    ownerToken: str
    at: int


@dataclass(frozen=True)
class RetryScheduled:
    workflowUid: str
    instanceId: str
    name: str
    attempt: int
    due: int
    ownerToken: str
    at: int


@dataclass(frozen=True)
class EventAccepted:
    workflowUid: str
    instanceId: str
    sequence: int
    type: str
    size: int
    at: int
    payload: str | None = None


@dataclass(frozen=True)
class InstanceStatusChanged:
    workflowUid: str
    instanceId: str
    status: str
    at: int
    output: str | None = None
    errorReason: str | None = None
    errorMessage: str | None = None


@dataclass(frozen=True)
class InstancePurged:
    workflowUid: str
    instanceId: str
    at: int


@dataclass(frozen=True)
class InstancesPurged:
    workflowUid: str
    at: int
    operationId: str | None = None


# ---- the key topic (<prefix>.workflow.keys, compacted, key <keyId>; a tombstone destroys a key) ----


@dataclass(frozen=True)
class DataKey:
    keyId: str
    workflowUid: str
    instanceId: str
    key: bytes = field(repr=False)  # a Host secret: never in a log line
    at: int
    sequence: int | None = None  # an event's key; None: the instance's


@dataclass(frozen=True)
class RecordQuarantined:
    processor: str
    sourceTopic: str
    partition: int
    offset: int
    reason: str
    detail: str
    at: int
    value: bytes | None = None
    key: bytes | None = None


# What the control processor writes to the control topic (a decision's records).
ControlRecord = (
    CommandDecided
    | SpaceCreated
    | SpaceDeleted
    | TokenIssued
    | TokensRevoked
    | ResourceCreated
    | ResourceUpdated
    | ResourceStateChanged
    | ResourceObserved
    | ResourceDeleted
    | OperationStarted
    | OperationStateChanged
    | OperationPartSucceeded
    | InstanceCountsObserved
)

# What goes on the queue topic (acceptances by the gateway and a handler's sends; the engine's decisions).
QueueRecord = (
    MessageAccepted
    | BatchDelivered
    | MessagesAcknowledged
    | MessageRetryScheduled
    | MessageDeadLettered
    | MessageDiscarded
    | BatchEnded
    | QueuePurged
)

# What goes on the workflow instance log (the workflow engine's decisions).
WorkflowRecord = (
    InstanceCreated
    | InstanceContextStarted
    | StepAttemptCommitted
    | SleepScheduled
    | WaitScheduled
    | RetryScheduled
    | EventAccepted
    | InstanceStatusChanged
    | InstancePurged
    | InstancesPurged
)


@dataclass(frozen=True)
class WorkerLogged:
    space: str
    workerUid: str
    versionUid: str
    resourceUid: str
    level: str
    text: str
    at: int
    batchId: str | None = None
    instanceId: str | None = None
    step: str | None = None
    dropped: int = 0


@dataclass(frozen=True)
class MetricsSnapshot:
    service: str
    instance: str
    text: str
    at: int


# ---- engine snapshots (<prefix>.<engine>.snapshots, compacted; sumi.engines.snapshots) --------


@dataclass(frozen=True)
class SnapshotHeader:
    engine: str
    partition: int
    snapshotId: str
    covers: int
    chunks: int
    firstChunkOffset: int
    entries: int
    at: int


@dataclass(frozen=True)
class QueueSnapshotChunk:
    snapshotId: str
    index: int
    # Avro records nested in a chunk stay dicts (QueueSlice, OpenBatch): a chunk is read once,
    # column by column, by sumi.queue.rules._snapshot and by nothing else.
    queues: Sequence[dict[str, Any]]
    batches: Sequence[dict[str, Any]]


@dataclass(frozen=True)
class WorkflowSnapshotChunk:
    snapshotId: str
    index: int
    instances: Sequence[dict[str, Any]]  # InstanceFold records, read by sumi.workflow.rules._snapshot only
    decided: Sequence[str]


Record = (
    CommandSubmitted
    | ControlRecord
    | QueueRecord
    | WorkflowRecord
    | DataKey
    | RecordQuarantined
    | WorkerLogged
    | MetricsSnapshot
    | SnapshotHeader
    | QueueSnapshotChunk
    | WorkflowSnapshotChunk
)

RECORD_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        CommandSubmitted,
        CommandDecided,
        SpaceCreated,
        SpaceDeleted,
        TokenIssued,
        TokensRevoked,
        ResourceCreated,
        ResourceUpdated,
        ResourceStateChanged,
        ResourceObserved,
        ResourceDeleted,
        OperationStarted,
        OperationStateChanged,
        OperationPartSucceeded,
        InstanceCountsObserved,
        MessageAccepted,
        BatchDelivered,
        MessagesAcknowledged,
        MessageRetryScheduled,
        MessageDeadLettered,
        MessageDiscarded,
        BatchEnded,
        QueuePurged,
        InstanceCreated,
        InstanceContextStarted,
        StepAttemptCommitted,
        SleepScheduled,
        WaitScheduled,
        RetryScheduled,
        EventAccepted,
        InstanceStatusChanged,
        InstancePurged,
        InstancesPurged,
        DataKey,
        RecordQuarantined,
        WorkerLogged,
        MetricsSnapshot,
        SnapshotHeader,
        QueueSnapshotChunk,
        WorkflowSnapshotChunk,
    )
}
