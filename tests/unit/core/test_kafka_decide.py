"""The loop's pure decision about one consumed record: a record of ours, or a quarantine and why."""

from dataclasses import dataclass

import pytest

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.engines.shell import Shell
from sumi.wire import codec, kafka

GOOD = codec.encode(r.SpaceCreated("demo", 1))
UNKNOWN_FP = codec.MAGIC + b"\x01\x02\x03\x04\x05\x06\x07\x08" + GOOD[10:]


@dataclass
class FakeMessage:  # the fields of aiokafka's ConsumerRecord the quarantine reads
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty"),
        (b"", "empty"),
        (b'{"kind": "resource.create"}', "not_avro"),
        (b"\xc3", "not_avro"),
        (GOOD[:6], "truncated"),
        (GOOD[:-1], "truncated"),
        (GOOD[:10], "truncated"),
        (UNKNOWN_FP, "unknown_schema"),
        (GOOD + b"\x00\x00", "malformed"),
    ],
    ids=["none", "empty", "json", "one-byte", "short-header", "short-body", "header-only", "unknown-fp", "trailing"],
)
def test_bad_bytes_are_rejected_with_their_reason(value: bytes | None, reason: str) -> None:
    # QC-* robustness (issue 7): anything that is not a record of ours is named, never raised
    got = kafka.decode(value)
    assert isinstance(got, kafka.Rejected), got
    assert got.reason == reason, got
    assert got.detail


def test_a_record_of_ours_decodes() -> None:
    assert kafka.decode(GOOD) == r.SpaceCreated("demo", 1)


def test_a_handler_failure_is_apply_failed() -> None:
    why = kafka.failed(KeyError("name"))
    assert why == kafka.Rejected("apply_failed", "KeyError: 'name'")


def test_the_quarantine_record_carries_source_and_raw_bytes() -> None:
    settings = Settings("127.0.0.1:1", "postgresql://unused", topic_prefix="t1")
    msg = FakeMessage("t1.commands", 2, 41, b"demo", b"\xc3\x01junk")
    out = kafka.Quarantine(settings, "control").out(msg, kafka.decode(msg.value), now=7)  # type: ignore[arg-type]
    assert out.topic == "t1.quarantine"
    assert out.key == "t1.commands/2"
    assert out.record == r.RecordQuarantined(
        processor="control",
        sourceTopic="t1.commands",
        partition=2,
        offset=41,
        reason="truncated",
        detail=out.record.detail,
        at=7,
        value=b"\xc3\x01junk",
        key=b"demo",
    )
    assert codec.decode(codec.encode(out.record)) == out.record


class _Logic:
    """A processor's logic that remembers what it folded and raises on a chosen record."""

    def __init__(self) -> None:
        self.folded: list[object] = []

    def reset(self) -> None:
        self.folded = []

    def fold(self, record: object, key: str = "") -> None:
        if record == r.SpaceCreated("boom", 1):
            raise KeyError("boom")
        self.folded.append(record)

    def decide(self, record: object, now: int) -> list[kafka.Out]:
        if record == r.SpaceCreated("boom", 1):
            raise KeyError("boom")
        return [kafka.Out("t1.control", "demo", record)]


def _shell() -> tuple[Shell, _Logic]:
    logic = _Logic()
    settings = Settings("127.0.0.1:1", "postgresql://unused", topic_prefix="t1")
    return Shell(settings, "control", "t1.commands", logic, changelog_topic="t1.control"), logic


def test_the_transactional_loop_decides_or_quarantines_each_input() -> None:
    # issue 7: a bad input is quarantined in the batch's transaction; the next one is decided
    loop, _ = _shell()
    bad = FakeMessage("t1.commands", 0, 5, None, b"junk")
    boom = FakeMessage("t1.commands", 0, 6, b"x", codec.encode(r.SpaceCreated("boom", 1)))
    good = FakeMessage("t1.commands", 0, 7, b"demo", GOOD)
    [q1] = loop.take(bad, now=1)
    [q2] = loop.take(boom, now=1)
    [out] = loop.take(good, now=1)
    assert (q1.topic, q1.record.reason, q1.record.offset) == ("t1.quarantine", "not_avro", 5)
    assert (q2.topic, q2.record.reason, q2.record.offset) == ("t1.quarantine", "apply_failed", 6)
    assert "KeyError" in q2.record.detail
    assert out == kafka.Out("t1.control", "demo", r.SpaceCreated("demo", 1))


def test_the_changelog_fold_skips_what_it_cannot_take() -> None:
    # issue 7: a bad changelog record never stops the rebuild (no crash loop)
    loop, logic = _shell()
    for offset, value in enumerate([b"", GOOD[:12], codec.encode(r.SpaceCreated("boom", 1)), GOOD]):
        loop.fold(FakeMessage("t1.control", 0, offset, None, value))
    assert logic.folded == [r.SpaceCreated("demo", 1)]
