"""Schemas are the contract: each parses, each record type round-trips, and
golden records written by earlier builds still decode."""

import dataclasses
import io
import json
from pathlib import Path

import fastavro
import pytest

from sumi.core import records as r
from sumi.wire import codec

FIXTURES = Path(__file__).parents[2] / "fixtures" / "records"

SAMPLES = [
    r.CommandSubmitted("01j", "resource.create", "demo", "alice", False, '{"name":"q"}', 1, "k", "fp"),
    r.CommandDecided("01j", "demo", "alice", "resource.create", True, 202, 2, operationId="op_01j"),
    r.SpaceCreated("demo", 1),
    r.SpaceDeleted("demo", 2),
    r.TokenIssued("alice", "ab" * 32, False, 3, ({"space": "demo", "role": "editor"},)),
    r.TokensRevoked("alice", 4),
    r.ResourceCreated("res_1", "demo", "q", "u", "{}", 1, "op_1", 5),
    r.ResourceUpdated("res_1", "demo", "{}", 2, "op_2", 6),
    r.ResourceStateChanged("res_1", "demo", "active", 7),
    r.ResourceObserved("res_1", "demo", "{}", 8),
    r.ResourceDeleted("res_1", "demo", "op_3", 9),
    r.OperationStarted("op_1", "create", "demo", "res_1", 1, "alice", 10),
    r.OperationStateChanged("op_1", "demo", "failed", "none", 11, '{"code":"invalid_spec"}'),
    r.OperationPartSucceeded("op_4", "demo", 3, 11),
    r.InstanceCountsObserved("wf_1", "demo", 2, {"running": 2, "complete": 0}, 11),
    r.MessageAccepted("res_1", "demo", "msg_1", b"\x00\xff", 12, 13, "alice", "key"),
    r.BatchDelivered("res_1", "res_2", "bat_1", ("msg_1", "msg_2"), (1, 3), "res_3", 14),
    r.MessagesAcknowledged("res_1", "bat_1", ("msg_1",), "acknowledge", 15),
    r.MessageRetryScheduled("res_1", "msg_2", 30016, 4, "retry", 16, "bat_1"),
    r.MessageDeadLettered("res_1", "msg_2", "res_4", "msg_9", 17, "bat_1"),
    r.MessageDiscarded("res_1", "msg_3", "retention", 18),
    r.BatchEnded("res_1", "res_2", "bat_1", "threw", 19, "Error: boom"),
    r.QueuePurged("res_1", 20),
    r.InstanceCreated("wf_1", "inst-1", "demo", 21, '{"n":1}', "alice"),
    r.InstanceContextStarted("wf_1", "inst-1", "tok_1", "res_3", 1, 22),
    r.StepAttemptCommitted(
        "wf_1",
        "inst-1",
        "charge",
        "do",
        2,
        False,
        True,
        23,
        None,
        "step_failed",
        "Error: declined",
        '{"backoff":"constant","initialDelaySeconds":0,"maxAttempts":2,"maxDelaySeconds":43200}',
        None,
        "tok_1",
    ),
    r.SleepScheduled("wf_1", "inst-1", "nap", 86400024, "tok_2", 24),
    r.WaitScheduled("wf_1", "inst-1", "approval", "approved", 3600025, "tok_3", 25),
    r.RetryScheduled("wf_1", "inst-1", "charge", 2, 26, "tok_1", 26),
    r.EventAccepted("wf_1", "inst-1", 1, "approved", 33, 27, '{"by":"bob"}'),
    r.InstanceStatusChanged("wf_1", "inst-1", "errored", 28, None, "step_failed", "Error: declined"),
    r.InstancePurged("wf_1", "inst-1", 29),
    r.InstancesPurged("wf_1", 30, "op_4"),
    r.DataKey("dk_01j", "wf_1", "inst-1", bytes(range(32)), 31, 2),
    r.RecordQuarantined(
        "control", "sumi.commands", 2, 41, "unknown_schema", "fingerprint 00", 21, b"\xc3\x01", b"demo"
    ),
    r.WorkerLogged("demo", "res_w", "res_v", "res_c", "info", "hello", 42, "bat_1", None, None, 0),
    r.MetricsSnapshot("queue", "host:42", "# HELP x y\n", 43),
    r.SnapshotHeader("queue", 2, "snap_1", 1200, 3, 17, 4000, 44),
    r.QueueSnapshotChunk(
        "snap_1",
        0,
        [
            {
                "uid": "res_q",
                "space": "demo",
                "nextSeq": 2,
                "purged": False,
                "ids": ["m1", "m2"],
                "seqs": [0, 1],
                "acceptedAt": [10, 11],
                "visibleAt": [10, 11],
                "offsets": [4, -1],
                "deliveries": [1, 0],
                "batches": ["bat_1", None],
                "bodies": [None, b"hi"],
                "settled": ["m0"],
                "cold": {"ids": ["m3", "m4"], "seqs": [2, 1], "acceptedAt": [12, 0], "offsets": [6, 1]},
            }
        ],
        [
            {
                "batchId": "bat_1",
                "queueUid": "res_q",
                "consumerUid": "res_c",
                "messageIds": ["m1"],
                "attempts": [1],
                "versionUid": "res_v",
                "at": 12,
                "settledIds": [],
                "settledHow": [],
            }
        ],
    ),
]


SAMPLES.append(
    r.WorkflowSnapshotChunk(
        "snap_2",
        0,
        [
            {
                "key": "wf_1/inst-1",
                "workflowUid": "wf_1",
                "instanceId": "inst-1",
                "space": "demo",
                "params": '{"a":1}',
                "createdAt": 20,
                "status": "waiting",
                "output": None,
                "errorReason": None,
                "errorMessage": None,
                "owner": "tok_1",
                "contexts": 2,
                "versionUid": "res_v",
                "completed": [
                    {"name": "one", "kind": "do", "ok": True, "result": "1", "errorName": None, "errorMessage": None}
                ],
                "pendingNames": ["approval"],
                "pendingKinds": ["wait"],
                "configNames": ["one"],
                "configs": ['{"retries":{"limit":0}}'],
                "attemptNames": ["one"],
                "attempts": [1],
                "timer": {"kind": "wait", "name": "approval", "due": 99, "eventType": "approved", "attempt": 0},
                "events": [{"sequence": 1, "type": "other", "payload": None, "size": 0}],
                "eventsBytes": 0,
                "nextSequence": 2,
                "terminalAt": None,
            }
        ],
        ["cmd_1"],
    )
)


def test_every_schema_parses_and_has_a_record_type() -> None:
    names = {p.name.removesuffix(".avsc") for p in codec.schemas_dir().iterdir() if p.name.endswith(".avsc")}
    assert names == set(r.RECORD_TYPES)


@pytest.mark.parametrize("cls", list(r.RECORD_TYPES.values()), ids=lambda c: c.__name__)
def test_dataclass_mirrors_schema(cls: type) -> None:
    schema = json.loads((codec.schemas_dir() / f"{cls.__name__}.avsc").read_text())
    # Same names; the dataclass puts optional fields last, so order may differ.
    assert {f["name"] for f in schema["fields"]} == {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("record", SAMPLES, ids=lambda x: type(x).__name__)
def test_round_trip(record: object) -> None:
    assert codec.decode(codec.encode(record)) == record  # type: ignore[arg-type]


@pytest.mark.parametrize("record", SAMPLES, ids=lambda x: type(x).__name__)
def test_the_compiled_codec_writes_what_fastavros_public_writer_writes(record: object) -> None:
    # The wire format is the contract an auditor replays: the codec's fast path (fastavro's
    # compiled reader and writer, schemas parsed once, logical types read as the ints records
    # hold) must give the very bytes of fastavro's public call on the schema as written.
    assert codec._fast() == (codec._read_compiled, codec._write_compiled), "this fastavro takes the slow path"
    name = type(record).__name__
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    public = io.BytesIO()
    fastavro.schemaless_writer(public, codec.schema_of(name), codec._to_avro(values))
    assert codec.encode(record)[10:] == public.getvalue()  # type: ignore[arg-type]


def test_every_type_has_a_sample() -> None:
    assert {type(s).__name__ for s in SAMPLES} == set(r.RECORD_TYPES)


def test_golden_records_of_earlier_builds_still_decode() -> None:
    # tests/fixtures/records/<Type>.<n>.bin, written once by `python -m tests.unit.core.test_records`.
    files = sorted(FIXTURES.glob("*.bin"))
    assert len(files) >= len(SAMPLES)
    for path in files:
        record = codec.decode(path.read_bytes())
        assert type(record).__name__ == path.name.split(".")[0]
        expected = json.loads(path.with_suffix(".json").read_text())
        assert _jsonable(record) == expected


def _jsonable(record: object) -> object:
    # Bytes as hex at any depth (a snapshot chunk nests them), tuples as lists.
    return json.loads(json.dumps(dataclasses.asdict(record), default=bytes.hex))  # type: ignore[call-overload]


def test_unknown_fingerprint_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown schema fingerprint 0000000000000000"):
        codec.decode(b"\xc3\x01" + b"\x00" * 8 + b"\x00")


def test_bytes_without_the_single_object_marker_are_refused() -> None:
    with pytest.raises(ValueError, match="not an Avro single-object encoded record"):
        codec.decode(b'{"json": "is not Avro"}')


if __name__ == "__main__":
    # A fixture per schema version: a sample whose current schema has none gets the next number;
    # an earlier one is never rewritten (its .json is what this build decodes it to).
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for s in SAMPLES:
        name, data = type(s).__name__, codec.encode(s)
        earlier = sorted(FIXTURES.glob(f"{name}.*.bin"))
        if any(p.read_bytes()[:10] == data[:10] for p in earlier):
            continue
        n = len(earlier) + 1
        (FIXTURES / f"{name}.{n}.bin").write_bytes(data)
        (FIXTURES / f"{name}.{n}.json").write_text(json.dumps(_jsonable(s), indent=1) + "\n")
