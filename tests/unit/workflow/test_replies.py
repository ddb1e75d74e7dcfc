"""The reader of answers to calls through the log (`sumi.workflow.replies`): which partitions it reads, from
where, and which records it answers with, on a fake consumer."""

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from sumi.core import records as r
from sumi.core.problems import Problem
from sumi.wire import codec
from sumi.workflow.replies import Replies, command_id_of

TOPIC = "t.workflow"


class FakeReader:
    def __init__(self, partitions: int = 3) -> None:
        self.tps = [SimpleNamespace(topic=TOPIC, partition=p) for p in range(partitions)]
        self.paused: set[int] = set()
        self.positions: dict[int, int] = {}
        self.ends = dict.fromkeys(range(partitions), 7)
        self.asked: list[int] = []
        self.gate: asyncio.Event | None = None  # holds end_offsets while set
        self.fail = False

    def assign(self, partitions: list[Any]) -> None:
        assert [tp.partition for tp in partitions] == [tp.partition for tp in self.tps]

    def pause(self, *partitions: Any) -> None:
        self.paused |= {tp.partition for tp in partitions}

    def resume(self, *partitions: Any) -> None:
        self.paused -= {tp.partition for tp in partitions}

    def seek(self, partition: Any, offset: int) -> None:
        self.positions[partition.partition] = offset

    async def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        self.asked += [tp.partition for tp in partitions]
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise ConnectionError("broker away")
        return {tp: self.ends[tp.partition] for tp in partitions}

    async def getmany(self, *partitions: Any, timeout_ms: int = 0) -> dict[Any, list[Any]]:
        await asyncio.sleep(timeout_ms / 1000)
        return {}


def attached(reader: FakeReader) -> Replies:
    replies = Replies(TOPIC)
    replies.attach(reader, reader.tps)  # type: ignore[arg-type]
    return replies


def decided(command_id: str) -> bytes:
    return codec.encode(r.CommandDecided(command_id, "demo", "worker:v", "instance.event", True, 202, 1, result="{}"))


async def test_a_partition_is_read_from_its_end_only_while_someone_waits() -> None:  # WF-18, WF-27
    reader = FakeReader()
    replies = attached(reader)
    assert reader.paused == {0, 1, 2}  # nothing read before a call
    async with replies.expect("c1", 1):
        assert reader.asked == [1] and reader.positions == {1: 7} and reader.paused == {0, 2}
        assert replies.reading.is_set()
        reader.ends[1] = 9
        async with replies.expect("c2", 1):  # read already: no second ListOffsets, no seek back
            assert reader.asked == [1] and reader.positions == {1: 7}
        assert reader.paused == {0, 2}  # c1 still waits
    assert reader.paused == {0, 1, 2} and not replies.waiting and not replies.reading.is_set()
    async with replies.expect("c3", 1):  # read again from the end as it is now
        assert reader.asked == [1, 1] and reader.positions == {1: 9}


async def test_waiters_arriving_while_the_end_is_noted_share_it_and_submit_after() -> None:  # WF-18
    reader = FakeReader()
    replies = attached(reader)
    reader.gate = asyncio.Event()
    entered: list[str] = []

    async def call(command_id: str) -> None:
        async with replies.expect(command_id, 0):
            entered.append(command_id)  # where the command would be submitted

    calls = [asyncio.create_task(call(x)) for x in ("a", "b")]
    await asyncio.sleep(0.01)
    assert entered == [] and reader.asked == [0]  # neither submits before the position is set
    reader.gate.set()
    await asyncio.gather(*calls)
    assert sorted(entered) == ["a", "b"] and reader.asked == [0] and reader.paused == {0, 1, 2}


async def test_a_position_noted_for_waiters_that_left_is_dropped() -> None:  # WF-27
    reader = FakeReader()
    replies = attached(reader)
    reader.gate = asyncio.Event()

    async def call() -> None:
        async with replies.expect("gone", 2):
            pass

    task = asyncio.create_task(call())
    await asyncio.sleep(0.01)
    task.cancel()  # its context stopped while the end was being noted
    await asyncio.gather(task, return_exceptions=True)
    reader.gate.set()
    await asyncio.sleep(0.01)
    assert reader.paused == {0, 1, 2} and reader.positions == {} and not replies.waiting


async def test_a_failed_position_fails_its_waiters_and_the_next_asks_again() -> None:  # WF-27
    reader = FakeReader()
    replies = attached(reader)
    reader.fail = True
    with pytest.raises(ConnectionError):
        async with replies.expect("x", 0):
            pass
    reader.fail = False
    async with replies.expect("y", 0):
        assert reader.asked == [0, 0] and reader.positions == {0: 7}


async def test_only_an_awaited_decision_answers() -> None:  # WF-18
    replies = attached(FakeReader())
    async with replies.expect("c1", 0) as answer:
        replies.take(None)
        replies.take(codec.encode(r.InstanceStatusChanged("w", "c1", "running", 1)))  # not a decision
        replies.take(decided("c2"))  # another replica's or a gateway's command
        assert not answer.done()
        replies.take(decided("c1"))
        replies.take(decided("c1"))  # a second copy changes nothing
        rec = await answer
        assert isinstance(rec, r.CommandDecided) and rec.commandId == "c1"


def test_the_command_id_is_read_from_the_bytes() -> None:  # WF-18
    for command_id in ("c", "x" * 63, "x" * 64, "wfc_" + "é" * 300):
        assert command_id_of(decided(command_id)) == command_id


async def test_a_call_before_the_reader_is_attached_is_backend_unavailable() -> None:  # WF-27
    with pytest.raises(Problem) as refused:
        async with Replies(TOPIC).expect("c", 0):
            pass
    assert refused.value.code == "backend_unavailable"
