"""Bounded storage: settled queue rows leave Postgres a while after their settlement.

A periodic task of the projections service. Each pass deletes, in one transaction, the
rows settled before `now - SUMI_SETTLED_RETENTION_SECONDS` and moves the table's mark
(`prune_marks`) to that cutoff. Rows are final once settled and the stats' cumulative
counters are kept apart (`queue_counters`), so no count changes with a prune.

The audit rebuilds the read models from the topics, which still hold every settled
message; it prunes its rebuilt schema to the live schema's marks before comparing
(`paused` keeps a live pass from moving a mark meanwhile), so both sides hold exactly
the rows settled at or after the same cutoff. Rejected: comparing only rows younger than
the cutoff (a rebuild whose pruning code differed from the live one would pass unseen), and
a cutoff taken from record times inside the projection's batches (a quiet partition would
then never prune, and the projection runner would need the setting).

Workflow rows need no pass here: instance and history rows leave with the engine's
`InstancePurged` (retention, WF-47), a record both the live projection and a rebuild fold.
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from sumi.core.config import Settings
from sumi.wire import pgtext

log = logging.getLogger(__name__)

QUEUE = "queue_messages"
_DELETE_CHUNK = 10_000  # rows per statement: a pass after a long pause holds no lock for long
_DELETE = "DELETE FROM queue_messages WHERE ctid IN (SELECT ctid FROM queue_messages WHERE settled_at < %s LIMIT %s)"
_MARK = (
    "INSERT INTO prune_marks (what, before) VALUES (%s, %s) "
    "ON CONFLICT (what) DO UPDATE SET before = GREATEST(prune_marks.before, EXCLUDED.before)"
)


def cutoff(now: datetime, retention_seconds: int) -> datetime:
    """Rows settled before this instant may go."""
    return now - timedelta(seconds=retention_seconds)


def _lock_key(schema: str) -> str:
    return f"sumi-prune-{schema}"


async def _connect(settings: Settings, schema: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        settings.database_url, autocommit=True, options=f"-c search_path={schema}", context=pgtext.ADAPTERS
    )


async def prune(conn: psycopg.AsyncConnection[Any], schema: str, before: datetime) -> int:
    """Delete the rows settled before `before` and mark it; how many rows went."""
    gone = 0
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_lock_key(schema),))
        while True:
            cur = await conn.execute(_DELETE, (before, _DELETE_CHUNK))
            gone += cur.rowcount
            if cur.rowcount < _DELETE_CHUNK:
                break
        await conn.execute(_MARK, (QUEUE, before))
    return gone


async def every(settings: Settings) -> None:
    """Prune every `prune_interval_seconds`, for ever (the projections service runs this)."""
    conn = await _connect(settings, settings.db_schema)
    try:
        while True:
            before = cutoff(datetime.now(UTC), settings.settled_retention_seconds)
            gone = await prune(conn, settings.db_schema, before)
            if gone:
                log.info("pruned %d settled queue rows settled before %s", gone, before.isoformat())
            await asyncio.sleep(settings.prune_interval_seconds)
    finally:
        await conn.close()


@asynccontextmanager
async def paused(settings: Settings) -> AsyncIterator[None]:
    """No live pass runs while this is held (the audit compares meanwhile)."""
    conn = await _connect(settings, settings.db_schema)
    try:
        await conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (_lock_key(settings.db_schema),))
        yield
    finally:
        await conn.close()  # the session's advisory lock goes with it


async def like(settings: Settings, live: str, rebuilt: str) -> None:
    """Prune the rebuilt schema to the live schema's marks (call inside `paused`)."""
    async with await _connect(settings, live) as conn:
        marks = await (await conn.execute("SELECT what, before FROM prune_marks")).fetchall()
    async with await _connect(settings, rebuilt) as conn:
        for what, before in marks:
            if what == QUEUE:
                await prune(conn, rebuilt, before)
