"""Read models of the instance log (`<prefix>.workflow`): instances, their history, counts.

- `workflow_instances`: one row per instance (status, output, error, times) for §5's
  get and list. Counts per workflow and status (`workflow_counts`) follow it by trigger.
- `workflow_history`: every record of an instance in commit order as `{seq, type, at,
  data}` (host-api.md section 5), `seq` counted per instance from 1.
- The engine's `CommandDecided` records go to the shared `decisions` table, where the
  gateway waits for them (request–reply, as with the control processor).

All records of an instance share its key's partition, so the offset of the last record
applied to an instance's row makes every record apply at most once. A purge (retention,
WF-47; the Workflow's delete, WF-13) removes the rows: the ID is unknown afterwards; a
deleted Workflow's UID stays in `workflow_purged`.
"""

import dataclasses
import json
from typing import Any

import psycopg

from sumi.core import records as r
from sumi.core.times import rfc3339
from sumi_projections import control
from sumi_projections.control import ts

Cursor = psycopg.AsyncCursor[Any]

# Fields of a record that hold a document (canonical JSON on the log): shown as JSON.
DOCUMENTS = ("params", "result", "payload", "output", "config")
# Epoch-ms fields shown as RFC 3339, like `at`.
TIMES = ("deadline", "due")
# Not history: the key (it is in the path), the time (it is `at`), and the owner token (a
# fencing capability of the engine, no business of a reader).
HIDDEN = ("workflowUid", "instanceId", "space", "at", "createdAt", "ownerToken")

_CREATE = (
    "WITH i AS (INSERT INTO workflow_instances (workflow_uid, instance_id, space, status, created_at, "
    "updated_at, history_seq, last_offset) SELECT %(w)s, %(i)s, %(space)s, 'queued', %(at)s, %(at)s, 1, %(o)s "
    "WHERE NOT EXISTS (SELECT 1 FROM workflow_purged WHERE workflow_uid = %(w)s) "
    "ON CONFLICT (workflow_uid, instance_id) DO NOTHING RETURNING history_seq) "
    "INSERT INTO workflow_history (workflow_uid, instance_id, seq, type, at, data) "
    "SELECT %(w)s, %(i)s, history_seq, %(type)s, %(at)s, %(data)s FROM i"
)
# One statement for every other record of an instance; status, output and error change
# only when given (a status change), so most records just append a history row.
_APPEND = (
    "WITH i AS (UPDATE workflow_instances SET history_seq = history_seq + 1, last_offset = %(o)s, "
    "updated_at = %(at)s, status = COALESCE(%(status)s, status), output = COALESCE(%(output)s::jsonb, output), "
    "error_reason = COALESCE(%(reason)s, error_reason), error_message = COALESCE(%(message)s, error_message) "
    "WHERE workflow_uid = %(w)s AND instance_id = %(i)s AND last_offset < %(o)s RETURNING history_seq) "
    "INSERT INTO workflow_history (workflow_uid, instance_id, seq, type, at, data) "
    "SELECT %(w)s, %(i)s, history_seq, %(type)s, %(at)s, %(data)s FROM i"
)

HISTORY = (
    r.InstanceContextStarted,
    r.StepAttemptCommitted,
    r.SleepScheduled,
    r.WaitScheduled,
    r.RetryScheduled,
    r.EventAccepted,
    r.InstanceStatusChanged,
)


def history_data(rec: Any) -> dict[str, Any]:
    """A record's fields as a history row's `data`: absent optionals left out."""
    data: dict[str, Any] = {}
    for name, value in dataclasses.asdict(rec).items():
        if name in HIDDEN or value is None:
            continue
        if name in DOCUMENTS:
            value = json.loads(value)
        elif name in TIMES:
            value = rfc3339(value)
        data[name] = value
    return data


def _params(rec: Any, offset: int) -> dict[str, Any]:
    status = getattr(rec, "status", None) if isinstance(rec, r.InstanceStatusChanged) else None
    return {
        "w": rec.workflowUid,
        "i": rec.instanceId,
        "o": offset,
        "at": ts(rec.createdAt if isinstance(rec, r.InstanceCreated) else rec.at),
        "type": type(rec).__name__,
        "data": json.dumps(history_data(rec), ensure_ascii=False),
        "space": getattr(rec, "space", None),
        "status": status,
        "output": getattr(rec, "output", None) if status else None,
        "reason": getattr(rec, "errorReason", None) if status else None,
        "message": getattr(rec, "errorMessage", None) if status else None,
    }


def _statement(rec: Any) -> str | None:
    if isinstance(rec, r.InstanceCreated):
        return _CREATE
    if isinstance(rec, HISTORY):
        return _APPEND
    return None


async def apply_many(cur: Cursor, records: list[tuple[Any, int, int]]) -> None:
    """One partition's records in log order; each run of records sharing a statement goes
    as one pipelined `executemany` (a commit of many instances' steps is one round trip)."""
    run: list[dict[str, Any]] = []
    sql: str | None = None
    for rec, partition, offset in records:
        this = _statement(rec)
        if run and this != sql:
            await cur.executemany(sql, run)  # type: ignore[arg-type]
            run = []
        if this is None:
            await apply(cur, rec, partition, offset)
        else:
            run.append(_params(rec, offset))
        sql = this
    if run:
        await cur.executemany(sql, run)  # type: ignore[arg-type]


async def apply(cur: Cursor, rec: Any, partition: int, offset: int) -> None:
    sql = _statement(rec)
    if sql is not None:
        await cur.execute(sql, _params(rec, offset))
    elif isinstance(rec, r.InstancePurged):
        for table in ("workflow_history", "workflow_instances"):
            await cur.execute(
                f"DELETE FROM {table} WHERE workflow_uid = %s AND instance_id = %s",
                (rec.workflowUid, rec.instanceId),
            )
    elif isinstance(rec, r.InstancesPurged):
        # The Workflow's instances live in every partition, and partitions are applied in no
        # particular order among themselves: a tombstone keeps a record of another partition
        # that is applied later from bringing an instance back (UIDs are never reused).
        await cur.execute(
            "INSERT INTO workflow_purged (workflow_uid, purged_at) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (rec.workflowUid, ts(rec.at)),
        )
        for table in ("workflow_history", "workflow_instances"):
            await cur.execute(
                f"DELETE FROM {table} WHERE workflow_uid = %s",
                (rec.workflowUid,),
            )
    elif isinstance(rec, r.CommandDecided):
        await control.apply(cur, rec, partition, offset)
