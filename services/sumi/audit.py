"""`sumi replay`: the audit. Every read model is rebuilt from the topics into a
fresh schema, up to exactly the offsets the live projections have reached,
and compared row for row with the live schema (rule 1: Kafka is the truth).

Records the projections cannot decode or apply are reported, not fatal: the
replay quarantines them the way the live projections do, but only into its
report (an audit writes nothing to the topics)."""

import asyncio
import dataclasses
import time

import psycopg

from sumi.core import pgtext
from sumi.core import records as r
from sumi.core.config import Settings
from sumi_projections import _prune, drop, migrate, runners
from sumi_projections._runner import Collected

# Bookkeeping, not folds of the log: how far each projection and prune pass got, and when.
SKIP = {"projection_offsets", "projection_status", "schema_version", "prune_marks"}


@dataclasses.dataclass
class Audit:
    differences: list[str]  # between the live read models and the replayed ones
    quarantined: list[r.RecordQuarantined]  # what the replay could not decode or apply

    def lines(self) -> list[str]:
        out = list(self.differences)
        out += [
            f"quarantined: {q.sourceTopic}[{q.partition}]@{q.offset} by {q.processor}: {q.reason} ({q.detail})"
            for q in self.quarantined
        ]
        return out


async def replay_and_compare(settings: Settings, timeout: float = 120.0) -> Audit:
    replay = dataclasses.replace(settings, db_schema=f"{settings.db_schema}_replay_{int(time.time())}")
    await asyncio.to_thread(migrate, settings.database_url, replay.db_schema)
    try:
        targets = await _live_offsets(settings)
        sink = Collected()
        await asyncio.wait_for(
            asyncio.gather(*(p.run(until=targets.get((p.name, p.topic), {}), sink=sink) for p in runners(replay))),
            timeout,
        )
        # The topics still hold what the live side has pruned: the rebuild is pruned to the same marks.
        async with _prune.paused(settings):
            await _prune.like(settings, settings.db_schema, replay.db_schema)
            differences = await _differences(settings, settings.db_schema, replay.db_schema)
        return Audit(differences, sink.records)
    finally:
        await asyncio.to_thread(drop, settings.database_url, replay.db_schema)


async def _live_offsets(settings: Settings) -> dict[tuple[str, str], dict[int, int]]:
    async with await psycopg.AsyncConnection.connect(settings.database_url, context=pgtext.ADAPTERS) as conn:
        rows = await (
            await conn.execute(
                f'SELECT projection, topic, partition, next_offset FROM "{settings.db_schema}".projection_offsets'
            )
        ).fetchall()
    out: dict[tuple[str, str], dict[int, int]] = {}
    for name, topic, partition, offset in rows:
        out.setdefault((name, topic), {})[partition] = offset
    return out


async def _differences(settings: Settings, live: str, replay: str) -> list[str]:
    out = []
    async with await psycopg.AsyncConnection.connect(settings.database_url, context=pgtext.ADAPTERS) as conn:
        tables = [
            t
            for (t,) in await (
                await conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (live,)
                )
            ).fetchall()
            if t not in SKIP
        ]
        for table in tables:
            # Rows compared as their text: `json` (documents kept verbatim) has no equality.
            for a, b in ((live, replay), (replay, live)):
                rows = await (
                    await conn.execute(
                        f'SELECT count(*) FROM (SELECT t::text FROM "{a}"."{table}" t EXCEPT ALL '
                        f'SELECT t::text FROM "{b}"."{table}" t) d'
                    )
                ).fetchone()
                if rows and rows[0]:
                    out.append(f"{table}: {rows[0]} rows in {a} not in {b}")
    return out
