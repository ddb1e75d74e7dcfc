"""Read model of the quarantine topic: what each processor set aside and why (/metrics counts it)."""

from typing import Any

import psycopg

from sumi.core import records as r
from sumi_projections.control import ts

Cursor = psycopg.AsyncCursor[Any]


async def apply(cur: Cursor, rec: Any, partition: int, offset: int) -> None:
    if not isinstance(rec, r.RecordQuarantined):
        return  # a record of another type written here by mistake: nothing to count
    await cur.execute(
        "INSERT INTO quarantined (processor, source_topic, source_partition, source_offset, reason, detail, "
        "size, quarantined_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (
            rec.processor,
            rec.sourceTopic,
            rec.partition,
            rec.offset,
            rec.reason,
            rec.detail,
            None if rec.value is None else len(rec.value),
            ts(rec.at),
        ),
    )
