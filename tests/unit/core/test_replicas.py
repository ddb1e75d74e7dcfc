"""The pure decisions behind replicas: who owns the control processor's partitions, which
partitions a projection replica lost (issue 17, item 2)."""

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from sumi.core.config import Settings
from sumi.engines.shares import Shares
from sumi.wire.assignors import HOLDING, one_owner, owner
from sumi.wire.fencing import Folds, PartitionProducers, transactional_id
from sumi_projections._owned import stale


def test_the_member_holding_the_partitions_keeps_them_when_another_joins() -> None:
    # QC-48: a standby joining never moves the control processor's partitions (a rebuild for nothing)
    assert owner({"a-1": b"", "b-2": HOLDING}) == "b-2"
    assert owner({"a-1": b"", "b-2": b""}) == "a-1"  # none holds them (the owner died): the first by ID
    assert owner({"c": HOLDING, "b": HOLDING}) == "b"  # two claims after a split: one, deterministically


def test_the_one_owner_assignor_gives_every_partition_to_one_member() -> None:
    # QC-48: one replica decides every command; the others get nothing and stand by
    cluster = ClusterMetadata()
    cluster._partitions = {"t.commands": {0: None, 1: None, 2: None}}  # what partitions_for_topic reads
    assignor = one_owner(lambda: False)
    members = {m: ConsumerProtocolMemberMetadata(0, ["t.commands"], data) for m, data in (("x", b""), ("y", HOLDING))}
    got = assignor.assign(cluster, members)
    assert got["y"].assignment == [("t.commands", [0, 1, 2])]
    assert got["x"].assignment == []
    assert assignor.metadata(["t.commands"]).user_data == b""
    assert one_owner(lambda: True).metadata(["t.commands"]).user_data == HOLDING


def test_a_transactional_id_belongs_to_the_input_partition() -> None:
    # QC-42: the replica taking a partition over fences its predecessor with the same ID
    settings = Settings("127.0.0.1:1", "postgresql://unused", topic_prefix="t1")
    assert transactional_id(settings, "verifier", 4) == "t1-verifier-p4"


def test_a_projection_replica_applies_only_partitions_whose_rows_have_not_moved() -> None:
    # QC-48: records of a partition another replica applied past are never applied again
    assert stale({0: 10, 1: 5, 2: 0}, {0: 10, 1: 9, 2: 0}) == {1}
    assert stale({3: 7}, {}) == {3}  # no row any more (a dropped schema): read it again


class _Generation:
    """An engine's generation that only notes what the shares do with it."""

    def __init__(self, fails: bool = False, cancelled: bool = False) -> None:
        self.fails, self.cancelled = fails, cancelled
        self.taken: list[tuple[int, int]] = []
        self.ended = asyncio.Event()
        self.ready: Callable[[], None] | None = None
        self.owned: frozenset[int] = frozenset()

    async def generation(self, owned: frozenset[int], producers: PartitionProducers, ready: Callable[[], None]) -> None:
        self.owned, self.ready = owned, ready
        try:
            if self.fails:
                raise RuntimeError("a commit failed")
            if self.cancelled:  # e.g. a client library's CancelledError, not a stop of ours
                raise asyncio.CancelledError()
            await asyncio.Event().wait()
        finally:
            self.ended.set()

    def take(self, message: Any) -> None:
        self.taken.append((message.partition, message.offset))

    def after_batch(self) -> None:
        pass


def _shares(engine: _Generation, calls: list[tuple[str, Any]]) -> Shares:
    settings = Settings("127.0.0.1:1", "postgresql://unused", topic_prefix="t1")
    shares = Shares(settings, "workflow-engine", "t1.workflow.commands", engine)
    consumer: Any = shares.consumer  # not started: no broker here
    consumer.pause = lambda *tps: calls.append(("pause", sorted(tp.partition for tp in tps)))
    consumer.resume = lambda *tps: calls.append(("resume", sorted(tp.partition for tp in tps)))
    consumer.seek = lambda tp, at: calls.append(("seek", (tp.partition, at)))

    async def assign(tps: list[TopicPartition]) -> None:
        calls.append(("fence", sorted(tp.partition for tp in tps)))

    producers: Any = shares.producers
    producers.assign = assign
    return shares


def _batch(*at: tuple[int, int]) -> dict[TopicPartition, list[Any]]:
    out: dict[TopicPartition, list[Any]] = {}
    for partition, offset in at:
        tp = TopicPartition("t1.workflow.commands", partition)
        out.setdefault(tp, []).append(SimpleNamespace(partition=partition, offset=offset))
    return out


async def test_a_workflow_generation_reads_only_once_rebuilt_and_ends_before_its_partitions_go() -> None:
    # WF-46: the assigned partitions are fenced and paused while the generation rebuilds them; a
    # command fetched meanwhile is read again later, not lost; one of a partition not owned is
    # not taken; a revocation returns only once the generation (its contexts) has ended.
    calls: list[tuple[str, Any]] = []
    engine = _Generation()
    shares = _shares(engine, calls)
    tps = [TopicPartition("t1.workflow.commands", p) for p in (2, 0)]
    await shares.membership.on_partitions_assigned(tps)
    await asyncio.sleep(0)
    assert calls == [("pause", [0, 2]), ("fence", [0, 2])] and engine.owned == {0, 2}
    shares._hand_over(_batch((0, 5), (0, 6)))
    assert engine.taken == [] and calls[-1] == ("seek", (0, 5))
    assert engine.ready is not None
    engine.ready()
    assert calls[-1] == ("resume", [0, 2])
    shares._hand_over(_batch((0, 5), (1, 3), (2, 9)))
    assert engine.taken == [(0, 5), (2, 9)]
    await shares.membership.on_partitions_revoked(tps)
    assert engine.ended.is_set() and calls[-1] == ("fence", []) and not shares.live
    shares._hand_over(_batch((0, 7)))
    assert engine.taken == [(0, 5), (2, 9)]  # fetched before the revocation: not taken


async def test_a_failed_workflow_generation_ends_the_replica() -> None:
    # WF-46: a generation that fails (a fenced producer) ends the process; its state is rebuilt from the log
    shares = _shares(_Generation(fails=True), [])
    await shares.membership.on_partitions_assigned([TopicPartition("t1.workflow.commands", 0)])
    with pytest.raises(RuntimeError, match="a commit failed"):
        await shares.failed


async def test_a_generation_cancelled_from_within_ends_the_replica() -> None:
    # WF-46: only a revocation ends a generation quietly; otherwise its partitions would stay
    # assigned here, their commands read and never decided (seen when a broker died)
    shares = _shares(_Generation(cancelled=True), [])
    await shares.membership.on_partitions_assigned([TopicPartition("t1.workflow.commands", 0)])
    with pytest.raises(RuntimeError, match="cancelled from within"):
        await asyncio.wait_for(shares.failed, 5)


async def test_a_decision_of_a_fold_a_rebalance_replaced_is_never_committed() -> None:
    # QC-48: a record fetched, or a report decided, against the state a rebalance dropped is stale
    settings = Settings("127.0.0.1:1", "postgresql://unused", topic_prefix="t1")
    folds, producers = Folds(), PartitionProducers(settings, "verifier")
    before = folds.epoch
    valid = folds.valid(before)
    assert valid() and not folds.stale(before)
    async with folds.refold(producers):
        assert folds.stale(folds.epoch)  # while it folds, nothing is taken, not even of the new fold
    assert folds.stale(before) and not valid()
    assert not folds.stale(folds.epoch) and folds.valid(folds.epoch)()
