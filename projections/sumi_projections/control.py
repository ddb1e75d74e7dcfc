"""Read models of the control log: Spaces, tokens, Resources, Operations, decisions."""

import json
from datetime import UTC, datetime
from typing import Any

import psycopg

from sumi.core import records as r

Cursor = psycopg.AsyncCursor[Any]


def ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


async def apply(cur: Cursor, rec: Any, partition: int, offset: int) -> None:
    handler = _HANDLERS.get(type(rec))
    if handler is not None:
        await handler(cur, rec)
        if type(rec) in _LOOKED_UP:
            await _changed(cur)


async def _changed(cur: Cursor) -> None:
    # Delivered when this transaction commits, in the order sent: ahead of the decision of the
    # command that made the change, if it follows in the same batch. Postgres folds the copies
    # of one transaction into one. The gateways drop the rows they keep (gateway._lookups).
    await cur.execute("SELECT pg_notify('sumi_changed_' || current_schema(), '')")


async def _space_created(cur: Cursor, rec: r.SpaceCreated) -> None:
    await cur.execute(
        "INSERT INTO spaces (name, created_at) VALUES (%s, %s) ON CONFLICT DO NOTHING", (rec.space, ts(rec.createdAt))
    )


async def _space_deleted(cur: Cursor, rec: r.SpaceDeleted) -> None:
    await cur.execute("DELETE FROM spaces WHERE name = %s", (rec.space,))
    await cur.execute("DELETE FROM grants WHERE space = %s", (rec.space,))


async def _token_issued(cur: Cursor, rec: r.TokenIssued) -> None:
    await cur.execute(
        "INSERT INTO tokens (token_hash, principal, admin, issued_at) VALUES (%s, %s, %s, %s) "
        "ON CONFLICT (token_hash) DO NOTHING",
        (rec.tokenHash, rec.principal, rec.admin, ts(rec.issuedAt)),
    )
    # A principal's grants are those of its latest token.
    await cur.execute("DELETE FROM grants WHERE principal = %s", (rec.principal,))
    for g in rec.grants:
        await cur.execute(
            "INSERT INTO grants (principal, space, role) VALUES (%s, %s, %s)", (rec.principal, g["space"], g["role"])
        )


async def _tokens_revoked(cur: Cursor, rec: r.TokensRevoked) -> None:
    await cur.execute("DELETE FROM tokens WHERE principal = %s", (rec.principal,))
    await cur.execute("DELETE FROM grants WHERE principal = %s", (rec.principal,))


async def _resource_created(cur: Cursor, rec: r.ResourceCreated) -> None:
    await cur.execute(
        "INSERT INTO resources (uid, space, name, form, generation, state, spec, created_at, updated_at) "
        "VALUES (%s, %s, %s, %s, %s, 'creating', %s, %s, %s) ON CONFLICT (uid) DO NOTHING",
        (rec.uid, rec.space, rec.name, rec.form, rec.generation, rec.spec, ts(rec.createdAt), ts(rec.createdAt)),
    )


async def _resource_updated(cur: Cursor, rec: r.ResourceUpdated) -> None:
    await cur.execute(
        "UPDATE resources SET spec = %s, generation = %s, updated_at = %s WHERE uid = %s",
        (rec.spec, rec.generation, ts(rec.updatedAt), rec.uid),
    )


async def _resource_state(cur: Cursor, rec: r.ResourceStateChanged) -> None:
    await cur.execute(
        "UPDATE resources SET state = %s, updated_at = %s WHERE uid = %s", (rec.state, ts(rec.at), rec.uid)
    )


async def _resource_observed(cur: Cursor, rec: r.ResourceObserved) -> None:
    await cur.execute("UPDATE resources SET observed = %s WHERE uid = %s", (rec.observed, rec.uid))


async def _resource_deleted(cur: Cursor, rec: r.ResourceDeleted) -> None:
    await cur.execute("DELETE FROM resources WHERE uid = %s", (rec.uid,))


async def _operation_started(cur: Cursor, rec: r.OperationStarted) -> None:
    await cur.execute(
        "INSERT INTO operations (id, kind, space, resource_uid, generation, principal, state, effect, "
        "created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, 'pending', 'none', %s, %s) "
        "ON CONFLICT (id) DO NOTHING",
        (
            rec.id,
            rec.kind,
            rec.space,
            rec.resourceUid,
            rec.generation,
            rec.principal,
            ts(rec.createdAt),
            ts(rec.createdAt),
        ),
    )


async def _operation_state(cur: Cursor, rec: r.OperationStateChanged) -> None:
    await cur.execute(
        "UPDATE operations SET state = %s, effect = %s, error = %s, updated_at = %s WHERE id = %s",
        (rec.state, rec.effect, rec.error, ts(rec.at), rec.id),
    )


# pg_notify refuses a payload of 8000 bytes or more: a larger decision is named by its ID, and
# the gateway reads its row.
NOTE_LIMIT = 8000

# All of a batch's decisions in one statement. The notification of a decision this statement
# inserted carries the decision itself (`n`), so the gateway answers without reading the row;
# one whose command was decided before (a retry decided again) names the ID only, since only
# the row holds the first decision. Delivered when this transaction commits, with the rows the
# decision answers for (gateway._decisions).
_DECIDED = (
    "WITH u AS (SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::bool[], %b::int[], "
    "%b::text[], %b::text[], %b::text[], %b::timestamptz[], %b::text[]) AS u(c, s, pr, k, a, st, o, p, r, d, n)), "
    "i AS (INSERT INTO decisions (command_id, space, principal, kind, accepted, status, operation_id, problem, "
    "result, decided_at) SELECT c, s, pr, k, a, st, o, p::json, r::json, d FROM u "
    "ON CONFLICT (command_id) DO NOTHING RETURNING command_id) "
    "SELECT pg_notify('sumi_decided_' || current_schema(), "
    "COALESCE(CASE WHEN i.command_id IS NOT NULL THEN u.n END, u.c)) "
    "FROM u LEFT JOIN i ON i.command_id = u.c"
)


def note(rec: r.CommandDecided) -> str | None:
    """The decision as the gateway reads its row (`decisions` columns; the documents as the
    JSON they are stored as), or None when it does not fit a notification."""
    text = (
        f'{{"command_id":{json.dumps(rec.commandId)},"accepted":{"true" if rec.accepted else "false"},'
        f'"status":{int(rec.status)},"operation_id":{json.dumps(rec.operationId)},'
        f'"problem":{rec.problem or "null"},"result":{rec.result or "null"}}}'
    )
    return text if len(text.encode()) < NOTE_LIMIT else None


async def decided(cur: Cursor, recs: list[r.CommandDecided]) -> None:
    """Decisions in log order; the first of a command ID is kept (also within `recs`)."""
    first: dict[str, r.CommandDecided] = {}
    for rec in recs:
        first.setdefault(rec.commandId, rec)
    if not first:
        return
    columns: tuple[list[Any], ...] = tuple([] for _ in range(11))
    for rec in first.values():
        row = (
            rec.commandId,
            rec.space,
            rec.principal,
            rec.kind,
            rec.accepted,
            rec.status,
            rec.operationId,
            rec.problem,
            rec.result,
            ts(rec.decidedAt),
            note(rec),
        )
        for column, value in zip(columns, row, strict=True):
            column.append(value)
    await cur.execute(_DECIDED, columns)


async def _command_decided(cur: Cursor, rec: r.CommandDecided) -> None:
    await decided(cur, [rec])


async def apply_many(cur: Cursor, records: list[tuple[Any, int, int]]) -> None:
    """One partition's records in log order, each run of decisions as one statement. A run
    ends at any other record, so a change's notification still precedes the decision of the
    command that made it."""
    run: list[r.CommandDecided] = []
    for rec, partition, offset in records:
        if isinstance(rec, r.CommandDecided):
            run.append(rec)
            continue
        await decided(cur, run)
        run = []
        await apply(cur, rec, partition, offset)
    await decided(cur, run)


# What the gateways look up on every request: tokens, grants, Spaces, a Resource's UID and state.
_LOOKED_UP = {
    r.SpaceCreated,
    r.SpaceDeleted,
    r.TokenIssued,
    r.TokensRevoked,
    r.ResourceCreated,
    r.ResourceStateChanged,
    r.ResourceDeleted,
}

_HANDLERS: dict[type, Any] = {
    r.SpaceCreated: _space_created,
    r.SpaceDeleted: _space_deleted,
    r.TokenIssued: _token_issued,
    r.TokensRevoked: _tokens_revoked,
    r.ResourceCreated: _resource_created,
    r.ResourceUpdated: _resource_updated,
    r.ResourceStateChanged: _resource_state,
    r.ResourceObserved: _resource_observed,
    r.ResourceDeleted: _resource_deleted,
    r.OperationStarted: _operation_started,
    r.OperationStateChanged: _operation_state,
    r.CommandDecided: _command_decided,
}
