"""`sumi replay`: the audit. Every read model is rebuilt from the topics into a
fresh schema, up to exactly the offsets the live projections have reached,
and compared row for row with the live schema (rule 1: Kafka is the truth).

Records the projections cannot decode or apply are reported, not fatal: the
replay quarantines them the way the live projections do, but only into its
report (an audit writes nothing to the topics).

Two more questions an auditor asks, answered from the topics alone: what the read
models were at a moment (`replay_until`, into a schema of its own), and what happened
to one Resource, message or instance (`records_about`, every record naming it, with
topic, partition and offset to cite)."""

import asyncio
import dataclasses
import datetime
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.wire import codec, kafka, pgtext
from sumi_projections import Collected, drop, migrate, prune, runners

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
        async with prune.paused(settings):
            await prune.like(settings, settings.db_schema, replay.db_schema)
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


# ---- the read models as they stood at a moment ------------------------------------------------

Progress = Callable[[], None] | None


async def replay_until(
    settings: Settings, until_ms: int, schema: str | None = None, timeout: float = 120.0, progress: Progress = None
) -> Audit:
    """Rebuild every read model from the records committed at or before UNTIL_MS (epoch ms, the
    records' Kafka timestamps) into SCHEMA, a schema of its own that is kept for the auditor to
    query; the live schema is never written. The Host stamps each record when it produces it, so
    per partition the timestamps follow the offsets."""
    schema = schema or f"{settings.db_schema}_at_{until_ms}"
    if schema == settings.db_schema:
        raise ValueError("the replay never writes the live schema")
    replay = dataclasses.replace(settings, db_schema=schema)
    await asyncio.to_thread(migrate, settings.database_url, schema)
    sink = Collected()
    projections = runners(replay)
    targets = {p.topic: await _offsets_at(settings, p.topic, until_ms) for p in projections}
    await asyncio.wait_for(
        asyncio.gather(*(_counted(p.run(until=targets[p.topic], sink=sink), progress) for p in projections)), timeout
    )
    return Audit([], sink.records)


async def _counted(run: Awaitable[None], progress: Progress) -> None:
    await run
    if progress is not None:
        progress()


async def _offsets_at(settings: Settings, topic: str, until_ms: int) -> dict[int, int]:
    """Per partition, the first offset of a record stamped after UNTIL_MS (else the end)."""
    consumer = kafka.new_consumer(settings)
    await consumer.start()
    try:
        tps = await kafka.partitions(consumer, topic)
        after = await consumer.offsets_for_times({tp: until_ms + 1 for tp in tps})
        ends = await consumer.end_offsets(tps)
        return {tp.partition: (after[tp].offset if after.get(tp) is not None else ends[tp]) for tp in tps}
    finally:
        await consumer.stop()


# ---- every record about one thing ---------------------------------------------------------------

AUDITED_TOPICS = ("commands", "control", "queue", "workflow.commands", "workflow", "quarantine")


@dataclasses.dataclass(frozen=True)
class Cited:
    """One record, decoded, with where it stands so an auditor can cite it."""

    topic: str
    partition: int
    offset: int
    timestamp: int  # epoch ms
    type: str
    record: dict[str, Any]

    def line(self) -> str:
        at = datetime.datetime.fromtimestamp(self.timestamp / 1000, datetime.UTC).isoformat(timespec="milliseconds")
        fields = json.dumps(self.record, ensure_ascii=False, sort_keys=True, default=_plain)
        return f"{self.topic}[{self.partition}]@{self.offset} {at} {self.type} {fields}"

    def as_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=_plain))  # type: ignore[no-any-return]


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple | frozenset):
        return list(value)
    raise TypeError(type(value).__name__)


def mentions(record: Any, target: str) -> bool:
    """Whether any field of RECORD (nested) is TARGET, or a key of its log (`<workflowUid>/<id>`)."""
    if isinstance(record, str):
        return record == target or record.endswith("/" + target)
    if isinstance(record, dict):
        return any(mentions(v, target) for v in record.values())
    if isinstance(record, list | tuple):
        return any(mentions(v, target) for v in record)
    return False


async def records_about(settings: Settings, target: str, also: str | None = None) -> list[Cited]:
    """Every committed record of the Host's topics that mentions TARGET (and ALSO, when given:
    an instance ID is only unique within its workflow), in commit order within each partition,
    the partitions merged by timestamp."""
    # One consumer a topic, read side by side: an audit's time is the slowest topic's, not their sum.
    scans = await asyncio.gather(*(_scan(settings, settings.topic(name), target, also) for name in AUDITED_TOPICS))
    out = [c for found in scans for c in found]
    return sorted(out, key=lambda c: (c.timestamp, c.topic, c.partition, c.offset))


async def _scan(settings: Settings, topic: str, target: str, also: str | None) -> list[Cited]:
    consumer = kafka.new_consumer(settings)
    await consumer.start()
    found: list[Cited] = []
    try:
        tps = await kafka.partitions(consumer, topic)
        consumer.assign(tps)
        for tp in tps:
            await consumer.seek_to_beginning(tp)
        ends = await consumer.end_offsets(tps)
        async for batch in kafka.batches(consumer, ends):
            for messages in batch.values():
                found += [c for m in messages if (c := _cited(m, target, also)) is not None]
    finally:
        await consumer.stop()
    return found


def _cited(message: Any, target: str, also: str | None) -> Cited | None:
    try:
        record = codec.decode(message.value)
    except Exception:  # an undecodable record is the quarantine's to report, not the audit's to stop on
        return None
    fields = dataclasses.asdict(record) if dataclasses.is_dataclass(record) else {}
    key = message.key.decode(errors="replace") if message.key else ""
    if not (mentions(fields, target) or mentions(key, target)):
        return None
    if also is not None and not (mentions(fields, also) or mentions(key, also)):
        return None
    return Cited(message.topic, message.partition, message.offset, message.timestamp, type(record).__name__, fields)
