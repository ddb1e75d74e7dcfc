"""Read models of the queue log: each message's state, and cumulative counters.

Each record applies at most once per message: a row remembers the offset of the
last record applied to it (all records of a message share its queue's
partition), and counters move only with the rows a record actually changed.

A settled row is final: no later record changes it or counts it again, so it makes no
difference to any counter whether the row is still there (a prune removes settled rows
after a while, `sumi_projections._prune`).

A row keeps where its message's `MessageAccepted` lies in the queue log, not its body: a peek
reads the bodies it shows from there (`sumi.wire.bodies`), as the engine does. A body kept here
was written with the row and copied again by each update of it (the delivery), for the one
read that wants it.
"""

from typing import Any

import psycopg

from sumi.core import records as r
from sumi_projections.control import ts

Cursor = psycopg.AsyncCursor[Any]

# The states a record of the log may still move a message out of: any but the settled ones.
# Not written `state IN ('pending', 'inflight')`: that is the predicate of the partial index
# `queue_messages_live`, and with statistics that lagged a burst the planner took that index
# for the updates below, scanning every live message of the table for each batch (a hash join
# over the backlog: 17.5 ms instead of 2.5 for a batch of 100 in a backlog of 30,000). Every
# update finds its rows by message ID, whatever the statistics say.
_LIVE = "state NOT IN ('acknowledged', 'deadlettered', 'discarded')"
# record type -> (new state, counter column or None); constant SQL, never built from input
_SETTLED = {
    r.MessagesAcknowledged: ("acknowledged", "acknowledged"),
    r.MessageDeadLettered: ("deadlettered", "dead_lettered"),
    r.MessageDiscarded: ("discarded", "discarded"),
}


# One constant statement for any number of appends (so Postgres and psycopg prepare it once):
# the rows come in as one array per column, in binary (the text form quotes every element by
# regular expression, which cost more than all the rest of the projection). A re-sent append
# (same deterministic message ID) is the same message: keep the first, also when both are in
# one statement (unnest keeps their log order, and DO NOTHING skips the later one).
_ACCEPT = (
    "INSERT INTO queue_messages (message_id, queue_uid, space, size, accepted_at, "
    "visible_at, log_partition, log_offset, principal, idempotency_key, last_offset) "
    "SELECT id, q, s, n, a, v, p, o, pr, k, o FROM unnest(%b::text[], %b::text[], %b::text[], "
    "%b::int[], %b::timestamptz[], %b::timestamptz[], %b::int[], %b::bigint[], "
    "%b::text[], %b::text[]) AS u(id, q, s, n, a, v, p, o, pr, k) "
    "ON CONFLICT (message_id) DO NOTHING"
)
_ACCEPT_CHUNK = 1000  # rows per statement


async def apply_many(cur: Cursor, records: list[tuple[Any, int, int]]) -> None:
    """Apply one partition's records in log order, with each run of consecutive appends as one
    INSERT: a send of 100 messages is one statement instead of 100 (the same rows result)."""
    run: list[tuple[Any, int, int]] = []
    for item in records:
        if isinstance(item[0], r.MessageAccepted):
            run.append(item)
            continue
        await _accept(cur, run)
        run = []
        await apply(cur, *item)
    await _accept(cur, run)


async def _accept(cur: Cursor, run: list[tuple[Any, int, int]]) -> None:
    for start in range(0, len(run), _ACCEPT_CHUNK):
        await _insert(cur, run[start : start + _ACCEPT_CHUNK])


async def _insert(cur: Cursor, run: list[tuple[Any, int, int]]) -> None:
    columns: tuple[list[Any], ...] = tuple([] for _ in range(10))
    for rec, partition, offset in run:
        for column, value in zip(
            columns,
            (
                rec.messageId,
                rec.queueUid,
                rec.space,
                len(rec.body),
                ts(rec.acceptedAt),
                ts(rec.visibleAt),
                partition,
                offset,
                rec.principal,
                rec.idempotencyKey,
            ),
            strict=True,
        ):
            column.append(value)
    await cur.execute(_ACCEPT, columns)


async def apply(cur: Cursor, rec: Any, partition: int, offset: int) -> None:
    if isinstance(rec, r.MessageAccepted):
        await _accept(cur, [(rec, partition, offset)])
    elif isinstance(rec, r.BatchDelivered):
        ids = list(rec.messageIds)
        await cur.execute(
            "UPDATE queue_messages SET state = 'inflight', "
            "attempts = (%s::int[])[array_position(%s::text[], message_id)], batch_id = %s, last_offset = %s "
            f"WHERE message_id = ANY(%s) AND last_offset < %s AND {_LIVE}",
            (list(rec.attempts), ids, rec.batchId, offset, ids, offset),
        )
    elif isinstance(rec, r.MessageRetryScheduled):
        await _counted(
            cur,
            "UPDATE queue_messages SET state = 'pending', visible_at = %s, attempts = %s, "
            f"batch_id = NULL, last_offset = %s WHERE message_id = %s AND last_offset < %s AND {_LIVE}",
            (ts(rec.visibleAt), rec.attempt, offset, rec.messageId, offset),
            rec.queueUid,
            "retried",
        )
    elif type(rec) in _SETTLED:
        state, counter = _SETTLED[type(rec)]
        ids = list(rec.messageIds) if isinstance(rec, r.MessagesAcknowledged) else [rec.messageId]
        await _counted(
            cur,
            "UPDATE queue_messages SET state = %s, batch_id = NULL, last_offset = %s, settled_at = %s "
            f"WHERE message_id = ANY(%s) AND last_offset < %s AND {_LIVE}",
            (state, offset, ts(rec.at), ids, offset),
            rec.queueUid,
            counter,
        )
    elif isinstance(rec, r.QueuePurged):
        # Deleting a queue deletes its messages (they are its data).
        await cur.execute("DELETE FROM queue_messages WHERE queue_uid = %s", (rec.queueUid,))
        await cur.execute("DELETE FROM queue_counters WHERE queue_uid = %s", (rec.queueUid,))


async def _counted(cur: Cursor, update: str, params: tuple[Any, ...], queue_uid: str, column: str) -> None:
    # The rows the update changed are counted in the same statement: nothing comes back to
    # Python, so the runner's pipeline sends it without waiting (cur.rowcount would not be
    # known until the pipeline syncs).
    await cur.execute(_COUNTER_SQL[column].format(update=update), (*params, queue_uid))


_COUNTER_SQL = {
    column: (
        "WITH c AS ({update} RETURNING 1) "
        f"INSERT INTO queue_counters (queue_uid, {column}) SELECT %s, count(*) FROM c HAVING count(*) > 0 "
        f"ON CONFLICT (queue_uid) DO UPDATE SET {column} = queue_counters.{column} + "
        f"EXCLUDED.{column}"
    )
    for column in ("acknowledged", "retried", "dead_lettered", "discarded")
}
