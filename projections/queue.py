"""Read models of the queue log: each message's state, and cumulative counters."""

from typing import Any

import psycopg

from sumi.core import records as r
from sumi.projections.control import ts

Cursor = psycopg.AsyncCursor[Any]


async def apply(cur: Cursor, rec: Any, partition: int, offset: int) -> None:
    if isinstance(rec, r.MessageAccepted):
        # A re-sent append (same deterministic message ID) is the same message: keep the first.
        await cur.execute(
            "INSERT INTO queue_messages (message_id, queue_uid, space, body, size, accepted_at, visible_at, "
            "log_partition, log_offset, principal, idempotency_key) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (message_id) DO NOTHING",
            (rec.messageId, rec.queueUid, rec.space, rec.body, len(rec.body), ts(rec.acceptedAt),
             ts(rec.visibleAt), partition, offset, rec.principal, rec.idempotencyKey))
