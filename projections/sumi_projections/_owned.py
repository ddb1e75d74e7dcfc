"""Which partitions one projection replica may apply, and the proof that no other replica applied them.

Replicas of a projection share its topic's partitions through a consumer group
(`<prefix>-projection-<schema>-<name>`: one group per set of read models, so an audit's
rebuild into a schema of its own never shares a group with the live projection). The
group only spreads the work. Exactly once stays in Postgres: every batch locks the
`projection_offsets` rows of its partitions first (in partition order, so two replicas
never deadlock on them) and applies a partition's records only if its row still holds the
offset this replica read it from. A replica that lost a partition in a rebalance, and
whose last batch of it arrives after the new owner committed, finds the row moved: it
drops those records and reads the partition again from the row (`stale`, `sync`).
Rejected: fencing by the group generation (aiokafka's rebalance callbacks run beside the
loop that applies, and a generation number proves nothing to Postgres), and advisory locks
held per partition (a connection that dies with the replica keeps them until Postgres
notices, which is the takeover time again).

Only the loop that applies seeks. The rebalance callbacks run in the consumer's own task,
so an assignment pauses the partitions it brings and the loop seeks them from their rows
between batches; a fetch from before that seek is discarded by the consumer.
"""

from collections.abc import Iterable
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

Cursor = psycopg.AsyncCursor[Any]

_ENSURE = (
    "INSERT INTO projection_offsets (projection, topic, partition, next_offset) "
    "SELECT %s, %s, p, 0 FROM unnest(%s::int[]) AS p ON CONFLICT DO NOTHING"
)
_READ = (
    "SELECT partition, next_offset FROM projection_offsets WHERE projection = %s AND topic = %s AND partition = ANY(%s)"
)
_LOCK = _READ + " ORDER BY partition FOR UPDATE"
_CLAIM = "SELECT projection_claim(%s, %s, %s, %s)"  # migrations/050_projection_claim.sql
_MOVE = (
    "UPDATE projection_offsets AS t SET next_offset = u.o "
    "FROM unnest(%s::int[], %s::bigint[]) AS u(p, o) "
    "WHERE t.projection = %s AND t.topic = %s AND t.partition = u.p"
)


def stale(expected: dict[int, int], stored: dict[int, int]) -> set[int]:
    """The partitions whose rows moved since this replica read them: another replica applied
    past where this one's records begin, so this one's records of them must not apply."""
    return {p for p, at in expected.items() if stored.get(p) != at}


class Owned:
    def __init__(self, consumer: AIOKafkaConsumer, projection: str, topic: str) -> None:
        self.consumer = consumer
        self.projection = projection
        self.topic = topic
        self.expected: dict[int, int] = {}  # partition -> the next offset its row held when read
        self.unsynced: set[TopicPartition] = set()

    # ---- the consumer's task (`sumi.wire.membership`, which pauses them): note, never seek ----

    async def revoked(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            self.expected.pop(tp.partition, None)
            self.unsynced.discard(tp)

    async def assigned(self, tps: list[TopicPartition]) -> None:
        self.unsynced |= set(tps)

    # ---- the applying loop --------------------------------------------------------------------

    def owns(self, tp: TopicPartition) -> bool:
        return tp.partition in self.expected and tp not in self.unsynced

    async def sync(self, conn: psycopg.AsyncConnection[Any], tps: Iterable[TopicPartition] | None = None) -> None:
        """Seek the partitions given (or those a rebalance brought) to their rows, and resume them.
        A partition never applied gets its row at 0: read from the log's start."""
        todo = sorted(set(tps) if tps is not None else self.unsynced)
        if not todo:
            return
        parts = [tp.partition for tp in todo]
        await conn.execute(_ENSURE, (self.projection, self.topic, parts))
        rows = await (await conn.execute(_READ, (self.projection, self.topic, parts))).fetchall()
        stored = {p: o for p, o in rows}
        assigned = self.consumer.assignment()
        for tp in todo:
            self.unsynced.discard(tp)
            if tp not in assigned:  # revoked meanwhile
                continue
            self.expected[tp.partition] = stored[tp.partition]
            self.consumer.seek(tp, stored[tp.partition])
            self.consumer.resume(tp)

    async def lock(self, cur: Cursor, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Inside the batch's transaction: lock these partitions' rows and return those this
        replica may apply (the rest are marked to be read again from their rows)."""
        wanted = sorted(tp for tp in tps if self.owns(tp))
        await cur.execute(_LOCK, (self.projection, self.topic, [tp.partition for tp in wanted]))
        stored = {p: o for p, o in await cur.fetchall()}
        lost = stale({tp.partition: self.expected[tp.partition] for tp in wanted}, stored)
        for tp in wanted:
            if tp.partition in lost:
                self.consumer.pause(tp)
                self.unsynced.add(tp)
        return {tp for tp in wanted if tp.partition not in lost}

    async def claim(self, cur: Cursor, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """`lock` for a pipelined transaction: the same rows locked in the same order, but the
        comparison runs in Postgres and a moved row fails the transaction (SerializationFailure)
        rather than coming back, so nothing waits for it. The caller then rolls back and takes
        the batch through `lock`, which sorts out the partitions that moved."""
        wanted = sorted(tp for tp in tps if self.owns(tp))
        if wanted:
            parts = [tp.partition for tp in wanted]
            await cur.execute(_CLAIM, (self.projection, self.topic, parts, [self.expected[p] for p in parts]))
        return set(wanted)

    async def move(self, cur: Cursor, next_offsets: dict[int, int]) -> None:
        """Inside the same transaction: the rows past the records applied. `committed` follows
        once the transaction has."""
        if next_offsets:
            parts = sorted(next_offsets)
            await cur.execute(_MOVE, (parts, [next_offsets[p] for p in parts], self.projection, self.topic))

    def committed(self, next_offsets: dict[int, int]) -> None:
        for p, o in next_offsets.items():
            if p in self.expected:
                self.expected[p] = o
