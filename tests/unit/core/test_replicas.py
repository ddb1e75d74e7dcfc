"""The pure decisions behind replicas: who owns the control processor's partitions, which
partitions a projection replica lost (issue 17, item 2)."""

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from sumi.core.config import Settings
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
