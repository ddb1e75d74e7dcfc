"""The queue read model on a real PostgreSQL: a delivery and its acknowledgement find their rows
by message ID, however large the backlog and however stale the table's statistics."""

from typing import Any

import psycopg
import pytest

from sumi.core import records as r
from sumi.gateway import _reads as reads
from sumi_projections import queue

pytestmark = pytest.mark.integration

Q = "res_q"
T0 = 1_700_000_000_000
BACKLOG = 20_000


class Recording:
    """A cursor that keeps every statement the projection sends, to be explained afterwards."""

    def __init__(self, cur: psycopg.AsyncCursor[Any]) -> None:
        self.cur = cur
        self.sent: list[tuple[str, Any]] = []

    async def execute(self, sql: str, params: Any = None) -> None:
        self.sent.append((sql, params))
        await self.cur.execute(sql, params)  # type: ignore[arg-type]


async def test_a_delivery_in_a_large_backlog_finds_its_rows_by_id(cur: psycopg.AsyncCursor[Any]) -> None:
    # QC-33, QC-52: attempts and states of the delivered messages, and the plan that finds them
    # A burst before any statistics: the table's live rows are far more than the planner thinks.
    await cur.execute("ALTER TABLE queue_messages SET (autovacuum_enabled = false)")
    ids = [f"m{i:06d}" for i in range(BACKLOG)]
    accepted = [(r.MessageAccepted(Q, "demo", m, b"x" * 64, T0, T0), 0, i) for i, m in enumerate(ids)]
    await queue.apply_many(cur, accepted)

    batch = tuple(ids[5000:5100])
    attempts = tuple(1 + i % 3 for i in range(len(batch)))
    rec = Recording(cur)
    await queue.apply(rec, r.BatchDelivered(Q, "res_c", "b1", batch, attempts, "v1", T0), 0, BACKLOG)  # type: ignore[arg-type]
    await queue.apply(rec, r.MessagesAcknowledged(Q, "b1", batch[:60], "ack", T0), 0, BACKLOG + 1)  # type: ignore[arg-type]

    await cur.execute("SELECT message_id, state, attempts FROM queue_messages WHERE batch_id = 'b1' ORDER BY 1")
    inflight = await cur.fetchall()
    assert [(m, s, a) for m, s, a in inflight] == [
        (m, "inflight", a) for m, a in zip(batch, attempts, strict=True) if m not in batch[:60]
    ]
    await cur.execute("SELECT count(*) FROM queue_messages WHERE state = 'acknowledged'")
    assert await cur.fetchone() == (60,)
    await cur.execute("SELECT acknowledged FROM queue_counters WHERE queue_uid = %s", (Q,))
    assert await cur.fetchone() == (60,)

    assert len(rec.sent) == 2
    for sql, params in rec.sent:
        await cur.execute("EXPLAIN " + sql, params)  # type: ignore[arg-type]
        plan = "\n".join(row[0] for row in await cur.fetchall())
        # Not every live row of the table (the partial index), nor the whole table: the IDs.
        assert "queue_messages_live" not in plan and "Seq Scan on queue_messages" not in plan, plan
        assert "queue_messages_pkey" in plan, plan


async def test_the_stats_count_the_live_messages_only(cur: psycopg.AsyncCursor[Any]) -> None:
    # QC-52: ready, delayed and in flight, read without going over the settled rows kept for days
    ids = [f"m{i:06d}" for i in range(BACKLOG)]
    accepted = [(r.MessageAccepted(Q, "demo", m, b"x", T0, T0), 0, i) for i, m in enumerate(ids)]
    await queue.apply_many(cur, accepted)
    offset = BACKLOG
    for start in range(0, BACKLOG - 30, 100):  # batches of at most 100 (QC-4), all acknowledged
        done = tuple(ids[start : min(start + 100, BACKLOG - 30)])
        await queue.apply(cur, r.BatchDelivered(Q, "res_c", f"b{start}", done, (1,) * len(done), "v1", T0), 0, offset)
        await queue.apply(cur, r.MessagesAcknowledged(Q, f"b{start}", done, "ack", T0), 0, offset + 1)
        offset += 2
    await queue.apply(cur, r.BatchDelivered(Q, "res_c", "last", tuple(ids[-10:]), (1,) * 10, "v1", T0), 0, offset)
    await cur.execute("ANALYZE queue_messages")

    await cur.execute(reads.QUEUE_COUNTS, (Q,))
    ready, delayed, in_flight, _ = await cur.fetchone()  # type: ignore[misc]
    assert (ready, delayed, in_flight) == (20, 0, 10)
    await cur.execute("EXPLAIN " + reads.QUEUE_COUNTS, (Q,))  # type: ignore[operator]
    plan = "\n".join(row[0] for row in await cur.fetchall())
    assert "queue_messages_live" in plan and "Seq Scan" not in plan, plan
