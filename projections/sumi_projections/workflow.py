"""Read models of the instance log (`<prefix>.workflow`): instances, their history, counts.

- `workflow_instances`: one row per instance (status, output, error, times) for §5's
  get and list. Counts per workflow and status (`workflow_counts`) follow it by trigger.
- `workflow_history`: every record of an instance in commit order as `{seq, type, at,
  data}` (host-api.md section 5), `seq` counted per instance from 1.
- The engine's `CommandDecided` records go to the shared `decisions` table, where the
  gateway waits for them (request–reply, as with the control processor); a status query's
  (`instance.status`) does not: its asker reads it from the log.

Documents reach this module opened (`sumi.wire.keyreader`: with the keys alive; a destroyed key's document
reads as absent). A terminal transition destroys the keys of the instance's unmatched events
(WF-25), so their history rows lose their payloads with it: the rows then read as a replay,
which can no longer open them, rebuilds them.

All records of an instance share its key's partition, so the offset of the last record
applied to an instance's row makes every record apply at most once. A purge (retention,
WF-47; the Workflow's delete, WF-13) removes the rows: the ID is unknown afterwards; a
deleted Workflow's UID stays in `workflow_purged`.
"""

from typing import Any

import psycopg

from sumi.core import records as r
from sumi.core.canonical import parsed_canonical
from sumi.core.times import rfc3339
from sumi.wire import codec
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

# Set-based statements, one per kind per batch segment (rows as binary arrays, as in
# sumi_projections.queue): a batch of many instances' step commits is three statements,
# not one per record (per-record statements held this projection to ~300 records/s).
# Instances created in the batch segment: each row written once, as its records leave it (its
# status, output and error the last a record gave, its history count, its last offset), with all
# of their history rows; not inserted and then updated once per later record. A purged
# Workflow's instance is not brought back, and a row already there (a create applied before,
# hence its later records too: the offsets commit with the rows) is left as it is, history and all.
_BORN = (
    "WITH i AS (INSERT INTO workflow_instances (workflow_uid, instance_id, space, status, output, "
    "error_reason, error_message, created_at, updated_at, history_seq, last_offset) "
    "SELECT w, i, s, st, o::json, rs, m, c, a, k, lo "
    "FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::timestamptz[], %b::timestamptz[], %b::int[], %b::bigint[]) AS u(w, i, s, st, o, rs, m, c, a, k, lo) "
    "WHERE NOT EXISTS (SELECT 1 FROM workflow_purged p WHERE p.workflow_uid = u.w) "
    "ON CONFLICT (workflow_uid, instance_id) DO NOTHING RETURNING workflow_uid, instance_id) "
    "INSERT INTO workflow_history (workflow_uid, instance_id, seq, type, at, data) "
    "SELECT h.w, h.i, h.n, h.y, h.a, h.d::json FROM unnest(%b::text[], %b::text[], %b::int[], "
    "%b::text[], %b::timestamptz[], %b::text[]) AS h(w, i, n, y, a, d) "
    "JOIN i ON i.workflow_uid = h.w AND i.instance_id = h.i"
)
# Every other record of an instance: `k` more history rows; status, output and error take the
# last value a record of the segment gave (a status change), else stay. An instance whose row
# already holds these offsets is left out, and so are its history rows, numbered from the
# row's seq before the segment. One statement: nothing comes back to Python, so the runner's
# pipeline runs it without a round trip of its own.
_ADVANCE = (
    "WITH moved AS (UPDATE workflow_instances AS t SET history_seq = t.history_seq + u.k, "
    "last_offset = u.last_o, updated_at = u.at, status = COALESCE(u.status, t.status), "
    "output = COALESCE(u.output::json, t.output), error_reason = COALESCE(u.reason, t.error_reason), "
    "error_message = COALESCE(u.message, t.error_message) "
    "FROM unnest(%b::text[], %b::text[], %b::int[], %b::bigint[], %b::bigint[], %b::timestamptz[], %b::text[], "
    "%b::text[], %b::text[], %b::text[]) AS u(w, i, k, first_o, last_o, at, status, output, reason, message) "
    "WHERE t.workflow_uid = u.w AND t.instance_id = u.i AND t.last_offset < u.first_o "
    "RETURNING t.workflow_uid AS w, t.instance_id AS i, t.history_seq - u.k AS base) "
    "INSERT INTO workflow_history (workflow_uid, instance_id, seq, type, at, data) "
    "SELECT h.w, h.i, moved.base + h.n, h.y, h.a, h.d::json FROM unnest(%b::text[], %b::text[], %b::int[], "
    "%b::text[], %b::timestamptz[], %b::text[]) AS h(w, i, n, y, a, d) "
    "JOIN moved ON moved.w = h.w AND moved.i = h.i"
)

# WF-25: an instance's events that no step consumed lose their payloads when it ends, in one
# statement of the batch's pipeline (nothing read back into Python, no round trip of its own).
# The history is `json` (it must hold the \u0000 escape, which `jsonb` refuses), and `json` has
# no operators to edit a document with; its operators also refuse a document holding \u0000.
# So the edit is on the text: an EventAccepted row's data is canonical, {"payload":…,
# "sequence":…,"size":…,"type":…} (`_data`), and past the payload the last
# `,"sequence":` is the member's own (no string escaped canonically holds `,"`): the row
# without its payload is the text from there on. The sequence numbers are compared through
# `->>` on the text with each \u0000 made \u0001: the same length and structure (in an escaped
# backslash followed by "u0000" too), the members and numbers as they were.
_NUMBER = "(replace({}.data::text, '\\u0000', '\\u0001')::json ->> '{}')"
_STRIP = (
    "UPDATE workflow_history AS h "
    'SET data = regexp_replace(h.data::text, \'^\\{"payload":.*,"sequence":\', \'{"sequence":\')::json '
    "FROM unnest(%b::text[], %b::text[]) AS u(w, i) "
    "WHERE h.workflow_uid = u.w AND h.instance_id = u.i AND h.type = 'EventAccepted' "
    "AND h.data::text LIKE '{\"payload\":%%' AND NOT EXISTS (SELECT 1 FROM workflow_history c "
    "WHERE c.workflow_uid = h.workflow_uid AND c.instance_id = h.instance_id AND c.type = 'StepAttemptCommitted' "
    f"AND {_NUMBER.format('c', 'eventSequence')} = {_NUMBER.format('h', 'sequence')})"
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


def _data(rec: Any) -> str:
    """A record's fields as a history row's `data`, canonical JSON (absent optionals left out,
    documents as JSON, times as RFC 3339). Each document goes in as the log holds it: the engine
    wrote it canonical, so parsing it and encoding it again (most of this projection's Python
    time per step) gave back the same text. The other members are encoded together, a document's
    member held by `"name":0`, which nothing else in the text can read as (a key's quotes are
    never escaped, a string's always are); the documents are put in from the last key back, so
    none is put inside another."""
    plain: dict[str, Any] = {}
    documents: list[tuple[str, str]] = []
    for name in codec.field_names(type(rec)):
        value = getattr(rec, name)
        if name in HIDDEN or value is None:
            continue
        if name in DOCUMENTS:
            documents.append((name, value))
            value = 0
        elif name in TIMES:
            value = rfc3339(value)
        plain[name] = value
    text = parsed_canonical(plain)
    for name, document in sorted(documents, reverse=True):
        text = text.replace(f'"{name}":0', f'"{name}":{document}', 1)
    return text


def _columns(rows: list[tuple[Any, ...]], width: int) -> tuple[list[Any], ...]:
    columns: tuple[list[Any], ...] = tuple([] for _ in range(width))
    for row in rows:
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    return columns


async def apply_many(cur: Cursor, records: list[tuple[Any, int, int]]) -> None:
    """One partition's records in log order. Purges cut the batch into segments; inside a
    segment the instances it creates are written whole (`_BORN`), then the others advanced
    (`_ADVANCE`), each as one statement."""
    segment: list[tuple[Any, int, int]] = []
    for item in records:
        if isinstance(item[0], (r.InstancePurged, r.InstancesPurged)):
            await _segment(cur, segment)
            segment = []
            await _purge(cur, item[0])
        else:
            segment.append(item)
    await _segment(cur, segment)


async def apply(cur: Cursor, rec: Any, partition: int, offset: int) -> None:
    await apply_many(cur, [(rec, partition, offset)])


async def _segment(cur: Cursor, items: list[tuple[Any, int, int]]) -> None:
    born: dict[tuple[str, str], list[tuple[Any, int]]] = {}
    for rec, _, o in items:
        if isinstance(rec, r.InstanceCreated):
            born.setdefault((rec.workflowUid, rec.instanceId), [(rec, o)])  # the first create counts
    later: list[tuple[Any, int]] = []
    for rec, _, o in items:
        if isinstance(rec, HISTORY):
            mine = born.get((rec.workflowUid, rec.instanceId))
            if mine is None:
                later.append((rec, o))
            elif o > mine[0][1]:  # before its create there was no row to apply it to
                mine.append((rec, o))
    await _born(cur, born)
    ended = await _advance(cur, later)
    ended += [key for key, recs in born.items() if any(_terminal(rec) for rec, _ in recs[1:])]
    if ended:
        # Stripping is idempotent: an instance left out above (applied before) is stripped again alike.
        await cur.execute(_STRIP, _columns(ended, 2))
    await control.decided(cur, [rec for rec, _, _ in items if isinstance(rec, r.CommandDecided) and _awaited(rec)])


async def _born(cur: Cursor, born: dict[tuple[str, str], list[tuple[Any, int]]]) -> None:
    if not born:
        return
    rows = []
    history = []
    for (w, i), recs in born.items():
        c = recs[0][0]
        created = ts(c.createdAt)
        history.append((w, i, 1, "InstanceCreated", created, _data(c)))
        history += [(w, i, n, type(rec).__name__, ts(rec.at), _data(rec)) for n, (rec, _) in enumerate(recs[1:], 2)]
        status, output, reason, message = _outcome(recs[1:])
        at = ts(recs[-1][0].at) if len(recs) > 1 else created
        rows.append((w, i, c.space, status or "queued", output, reason, message, created, at, len(recs), recs[-1][1]))
    await cur.execute(_BORN, (*_columns(rows, 11), *_columns(history, 6)))


def _awaited(rec: r.CommandDecided) -> bool:
    """A decision someone may look for in `decisions`. A status query's (`instance.status`, a
    binding's `get`/`status()` asked of another replica) is read from the log by the replica that
    asked, and holds only what the asker can open: a row of it would be a row per call, forever."""
    return rec.kind != "instance.status"


async def _advance(cur: Cursor, items: list[tuple[Any, int]]) -> list[tuple[str, str]]:
    """Instances whose rows were there before the segment; gives those that ended."""
    if not items:
        return []
    per: dict[tuple[str, str], list[tuple[Any, int]]] = {}
    for rec, offset in items:
        per.setdefault((rec.workflowUid, rec.instanceId), []).append((rec, offset))
    rows = [_advanced(key, recs) for key, recs in per.items()]
    history = [
        (w, i, n, type(rec).__name__, ts(rec.at), _data(rec))
        for (w, i), recs in per.items()
        for n, (rec, _) in enumerate(recs, start=1)
    ]
    await cur.execute(_ADVANCE, (*_columns(rows, 10), *_columns(history, 6)))
    return [key for key, recs in per.items() if any(_terminal(rec) for rec, _ in recs)]


def _terminal(rec: Any) -> bool:
    return isinstance(rec, r.InstanceStatusChanged) and rec.status in ("complete", "errored", "terminated")


def _outcome(recs: list[tuple[Any, int]]) -> tuple[str | None, str | None, str | None, str | None]:
    """Status, output, error reason and message as an instance's records (in log order) leave
    them; None: as they were."""
    status = output = reason = message = None
    for rec, _ in recs:
        if isinstance(rec, r.InstanceStatusChanged):
            status = rec.status
            output = rec.output if rec.output is not None else output
            reason = rec.errorReason if rec.errorReason is not None else reason
            message = rec.errorMessage if rec.errorMessage is not None else message
    return status, output, reason, message


def _advanced(key: tuple[str, str], recs: list[tuple[Any, int]]) -> tuple[Any, ...]:
    """One instance's row change for its records of a segment (in log order)."""
    last = recs[-1][0]
    return (*key, len(recs), recs[0][1], recs[-1][1], ts(last.at), *_outcome(recs))


async def _purge(cur: Cursor, rec: Any) -> None:
    if isinstance(rec, r.InstancePurged):
        for table in ("workflow_history", "workflow_instances"):
            await cur.execute(
                f"DELETE FROM {table} WHERE workflow_uid = %s AND instance_id = %s",
                (rec.workflowUid, rec.instanceId),
            )
        return
    # The Workflow's instances live in every partition, and partitions are applied in no
    # particular order among themselves: a tombstone keeps a record of another partition
    # that is applied later from bringing an instance back (UIDs are never reused). Each
    # partition that held instances has a marker of its own: the earliest one's time is
    # kept, whichever is applied first, so a replay (the audit) gives the same row.
    await cur.execute(
        "INSERT INTO workflow_purged (workflow_uid, purged_at) VALUES (%s, %s) ON CONFLICT (workflow_uid) "
        "DO UPDATE SET purged_at = LEAST(workflow_purged.purged_at, EXCLUDED.purged_at)",
        (rec.workflowUid, ts(rec.at)),
    )
    for table in ("workflow_history", "workflow_instances"):
        await cur.execute(f"DELETE FROM {table} WHERE workflow_uid = %s", (rec.workflowUid,))
