"""A consumer-group assignor for a processor whose decisions span partitions: one owner, standbys.

The control processor decides a command against state of other partitions than the
command's own (a token's grant names a Space, whose records are keyed by that Space), so
its partitions cannot be split among replicas. Its group gives every partition to one
member and none to the others, which stand by to take them over (after fencing, as
any new owner does: `sumi.wire.fencing`). The member that holds them says so in its
subscription metadata, so a standby joining never moves them; when it is gone, the first
member by ID takes them.
"""

from collections.abc import Callable, Iterable, Mapping

from aiokafka.cluster import ClusterMetadata
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

HOLDING = b"holding"


def owner(members: Mapping[str, bytes]) -> str:
    """The member that gets every partition: the one holding them, else the first by ID."""
    holding = sorted(m for m, data in members.items() if data == HOLDING)
    return (holding or sorted(members))[0]


def one_owner(holding: Callable[[], bool]) -> type[AbstractPartitionAssignor]:
    """The assignor of one consumer; `holding` says whether it holds partitions now."""

    class OneOwner(AbstractPartitionAssignor):  # type: ignore[misc]  # aiokafka is untyped here
        name = "sumi-one-owner"
        version = 0

        @classmethod
        def assign(
            cls, cluster: ClusterMetadata, members: Mapping[str, ConsumerProtocolMemberMetadata]
        ) -> dict[str, ConsumerProtocolMemberAssignment]:
            chosen = owner({m: meta.user_data or b"" for m, meta in members.items()})
            topics = sorted({t for meta in members.values() for t in meta.subscription})
            everything = [(t, sorted(cluster.partitions_for_topic(t) or ())) for t in topics]
            return {
                m: ConsumerProtocolMemberAssignment(cls.version, everything if m == chosen else [], b"")
                for m in members
            }

        @classmethod
        def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(cls.version, list(topics), HOLDING if holding() else b"")

        @classmethod
        def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
            pass

    return OneOwner
