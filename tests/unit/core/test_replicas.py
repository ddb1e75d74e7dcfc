"""The pure decisions behind replicas: who owns the control processor's partitions, which
partitions a projection replica lost (issue 17, item 2)."""

import pytest
from aiokafka import TopicPartition
from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from sumi.core.assignors import HOLDING, one_owner, owner
from sumi.core.config import Settings
from sumi.core.fencing import Folds, PartitionProducers, transactional_id
from sumi.engines.standby import Membership
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


async def test_a_workflow_engine_holder_given_nothing_ends_and_a_rebalance_resumes_where_it_read() -> None:
    # WF-46: a holder the group gave up on stops (its successor fenced it); one given everything
    # back after a standby joined reads on from its own position, not the committed one
    settings = Settings("127.0.0.1:1", "postgresql://unused", topic_prefix="t1")
    read: dict[TopicPartition, int] = {}
    member = Membership(settings, "workflow-engine", "t1.workflow.commands", resume=read.get)
    seeks: list[tuple[TopicPartition, int]] = []
    member.consumer.seek = lambda tp, at: seeks.append((tp, at))  # not started: no broker here
    tps = [TopicPartition("t1.workflow.commands", p) for p in (1, 0)]
    await member.on_partitions_assigned([])
    assert not member.lost.is_set() and not member.holding.is_set()  # a standby stays one
    await member.on_partitions_assigned(tps)
    assert member.holding.is_set() and member.assigned == sorted(tps) and seeks == []
    read[tps[0]] = 7
    await member.on_partitions_assigned(tps)
    assert seeks == [(tps[0], 7)]  # the partition it had read on from; the other from the group's offset
    await member.on_partitions_assigned([])
    assert member.lost.is_set()
    with pytest.raises(RuntimeError, match="another replica holds"):
        await member.until_lost()


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
