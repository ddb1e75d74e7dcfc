"""The gateway's read side: every query it runs against the projections' tables.

The gateway decides nothing from these rows (architecture.md rule 4); it answers
reads with them and waits on them for decisions. Keeping every statement here
puts the gateway's whole dependency on the read-model schema
(projections/sumi_projections/migrations/) in one place. Statements are constant
text; values travel as parameters, and the few variable parts (a column chosen by
the shape of a reference, a peek filter) are picked from constants, never built
from input.
"""

from typing import Any

from sumi.control.rules.forms.names import DURABLE_WORKFLOW, MODULE_WORKER
from sumi.gateway._backend import Backend, Row

RESOURCE_COLUMNS = "uid, space, name, form, generation, state, spec, observed, output, created_at, updated_at"
OPERATION_COLUMNS = "id, kind, space, resource_uid, generation, state, effect, error, created_at, updated_at"

PEEK_FILTERS = {  # per ?state= of a peek
    "ready": "state = 'pending' AND visible_at <= now()",
    "delayed": "state = 'pending' AND visible_at > now()",
    "inFlight": "state = 'inflight'",
    None: "state IN ('pending', 'inflight')",
}


def _ref_column(ref: str) -> str:
    """A reference is a UID or a name: UIDs hold an underscore, names cannot."""
    return "uid" if "_" in ref else "name"


# ---- callers and Spaces --------------------------------------------------------------------


async def caller(db: Backend, token_hash: str, space: str) -> Row | None:
    """Who a live token is, in one round trip (every request asks; kept until a change): principal,
    admin, the Spaces and roles of its grants (two arrays), and whether `space` exists ("" asks none)."""
    return await db.lookups.get(("caller", token_hash, space), lambda: _caller(db, token_hash, space))


async def _caller(db: Backend, token_hash: str, space: str) -> Row | None:
    return await db.fetchone(
        "SELECT t.principal, t.admin, "
        "coalesce(array_agg(g.space) FILTER (WHERE g.space IS NOT NULL), '{}') AS spaces, "
        "coalesce(array_agg(g.role) FILTER (WHERE g.space IS NOT NULL), '{}') AS roles, "
        "EXISTS (SELECT 1 FROM spaces WHERE name = %s) AS space_exists "
        "FROM tokens t LEFT JOIN grants g ON g.principal = t.principal "
        "WHERE t.token_hash = %s GROUP BY t.principal, t.admin",
        (space, token_hash),
    )


async def principals(db: Backend) -> list[Row]:
    """Every principal with a live token: admin, how many tokens, the last issued, its grants."""
    return await db.fetchall(
        "SELECT t.principal, bool_or(t.admin) AS admin, count(*) AS tokens, max(t.issued_at) AS last_issued_at, "
        "coalesce((SELECT json_agg(json_build_object('space', g.space, 'role', g.role) ORDER BY g.space) "
        "FROM grants g WHERE g.principal = t.principal), '[]') AS grants "
        "FROM tokens t GROUP BY t.principal ORDER BY t.principal"
    )


async def spaces(db: Backend, principal: str | None) -> list[Row]:
    """name, role, created_at of every Space (principal None: an admin's view) or of the principal's."""
    if principal is None:
        return await db.fetchall("SELECT name, 'admin' AS role, created_at FROM spaces ORDER BY name")
    return await db.fetchall(
        "SELECT s.name, g.role, s.created_at FROM spaces s JOIN grants g ON g.space = s.name "
        "WHERE g.principal = %s ORDER BY s.name",
        (principal,),
    )


# ---- decisions, Operations, Resources ------------------------------------------------------


async def operation(db: Backend, operation_id: str) -> Row | None:
    return await db.fetchone(f"SELECT {OPERATION_COLUMNS} FROM operations WHERE id = %s", (operation_id,))


async def resource(db: Backend, space: str, ref: str) -> Row | None:
    return await db.fetchone(
        f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE space = %s AND {_ref_column(ref)} = %s", (space, ref)
    )


async def resources(
    db: Backend, space: str, form: str | None, name: str | None, after: str | None, limit: int
) -> list[Row]:
    """A page of the Space's Resources in UID order, after the UID `after`."""
    params: dict[str, Any] = {"space": space, "form": form, "name": name, "after": after, "limit": limit}
    return await db.fetchall(
        f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE space = %(space)s "
        "AND (%(form)s::text IS NULL OR form = %(form)s) "
        "AND (%(name)s::text IS NULL OR name = %(name)s) "
        "AND (%(after)s::text IS NULL OR uid > %(after)s) ORDER BY uid LIMIT %(limit)s",
        params,
    )


# ---- queues --------------------------------------------------------------------------------


async def queue(db: Backend, space: str, form: str, ref: str) -> Row | None:
    """uid, state of the Space's queue Resource (of Form `form`) by UID or name (kept until a change)."""
    return await db.lookups.get(
        ("resource", space, form, ref),
        lambda: db.fetchone(
            f"SELECT uid, state FROM resources WHERE space = %s AND form = %s AND {_ref_column(ref)} = %s",
            (space, form, ref),
        ),
    )


async def worker(db: Backend, space: str, ref: str) -> Row | None:
    """uid, state of the Space's ModuleWorker by UID or name."""
    return await queue(db, space, MODULE_WORKER, ref)


async def workflow(db: Backend, space: str, ref: str) -> Row | None:
    """uid, state of the Space's DurableWorkflow by UID or name."""
    return await queue(db, space, DURABLE_WORKFLOW, ref)


async def known_messages(db: Backend, message_ids: list[str]) -> set[str]:
    """Which of these message IDs the queue projection already holds."""
    rows = await db.fetchall("SELECT message_id FROM queue_messages WHERE message_id = ANY(%s)", (message_ids,))
    return {row["message_id"] for row in rows}


async def projection_offsets(db: Backend, projection: str, topic: str, partitions: list[int]) -> dict[int, int]:
    """The next offset a projection will apply, per partition (a partition it applied nothing of is left out)."""
    rows = await db.fetchall(
        "SELECT partition, next_offset FROM projection_offsets WHERE projection = %s AND topic = %s "
        "AND partition = ANY(%s)",
        (projection, topic, partitions),
    )
    return {int(row["partition"]): int(row["next_offset"]) for row in rows}


# The live messages only, through the partial index of exactly those: settled rows stay for
# days (until their prune) and counting past them made a busy queue's stats cost a scan of
# everything it had settled since.
QUEUE_COUNTS = (
    "SELECT count(*) FILTER (WHERE state = 'pending' AND visible_at <= now()) AS ready, "
    "count(*) FILTER (WHERE state = 'pending' AND visible_at > now()) AS delayed, "
    "count(*) FILTER (WHERE state = 'inflight') AS in_flight, now() AS observed_at "
    f"FROM queue_messages WHERE queue_uid = %s AND {PEEK_FILTERS[None]}"
)


async def queue_stats(db: Backend, queue_uid: str) -> Row:
    """ready, delayed, in_flight, observed_at now; acknowledged, retried, dead_lettered, discarded ever."""
    counts = await db.fetchone(QUEUE_COUNTS, (queue_uid,))
    assert counts is not None  # an aggregate without GROUP BY is always one row
    totals = await db.fetchone(
        "SELECT acknowledged, retried, dead_lettered, discarded FROM queue_counters WHERE queue_uid = %s",
        (queue_uid,),
    )
    zero = {"acknowledged": 0, "retried": 0, "dead_lettered": 0, "discarded": 0}
    return {**counts, **(totals or zero)}


async def peek(db: Backend, queue_uid: str, state: str | None, limit: int) -> list[Row]:
    """message_id, accepted_at, attempts, size, peek_state, and where the body lies in the queue
    log (log_partition, log_offset); oldest first."""
    return await db.fetchall(
        "SELECT message_id, accepted_at, attempts, size, log_partition, log_offset, "
        "CASE WHEN state = 'inflight' THEN 'inFlight' "
        "WHEN visible_at <= now() THEN 'ready' ELSE 'delayed' END AS peek_state "
        f"FROM queue_messages WHERE queue_uid = %s AND {PEEK_FILTERS[state]} "
        "ORDER BY accepted_at, log_offset LIMIT %s",
        (queue_uid, limit),
    )


# ---- workflow instances (sumi_projections.workflow) ----------------------------------------


async def first_decision(db: Backend, prefix: str) -> Row | None:
    """The first decision of a command whose ID starts with `prefix` (hex and "_" only)."""
    return await db.fetchone(
        "SELECT command_id, accepted, status, operation_id, problem, result FROM decisions "
        "WHERE command_id LIKE %s ORDER BY decided_at LIMIT 1",
        (prefix.replace("_", "\\_") + "%",),
    )


async def instance(db: Backend, workflow_uid: str, instance_id: str) -> Row | None:
    """instance_id, status, output, error_reason, error_message of one instance."""
    return await db.fetchone(
        "SELECT instance_id, status, output, error_reason, error_message FROM workflow_instances "
        "WHERE workflow_uid = %s AND instance_id = %s",
        (workflow_uid, instance_id),
    )


async def instances(db: Backend, workflow_uid: str, status: str | None, after: str | None, limit: int) -> list[Row]:
    """A page of a workflow's instances in ID order (bytes, so paging is stable), after the ID `after`."""
    return await db.fetchall(
        "SELECT instance_id, status, created_at, updated_at FROM workflow_instances "
        "WHERE workflow_uid = %(w)s AND (%(s)s::text IS NULL OR status = %(s)s) "
        'AND (%(after)s::text IS NULL OR instance_id COLLATE "C" > %(after)s) '
        'ORDER BY instance_id COLLATE "C" LIMIT %(limit)s',
        {"w": workflow_uid, "s": status, "after": after, "limit": limit},
    )


async def history(db: Backend, workflow_uid: str, instance_id: str) -> list[Row]:
    """seq, type, at, data of every history row of an instance, in commit order."""
    return await db.fetchall(
        "SELECT seq, type, at, data FROM workflow_history WHERE workflow_uid = %s AND instance_id = %s ORDER BY seq",
        (workflow_uid, instance_id),
    )


# ---- the service ---------------------------------------------------------------------------


async def projections_status(db: Backend) -> Row:
    """n: projections known; stale: those not caught up with their topics in the last 5 s."""
    row = await db.fetchone(
        "SELECT count(*) AS n, count(*) FILTER (WHERE caught_up_at < now() - interval '5 seconds') "
        "AS stale FROM projection_status"
    )
    assert row is not None  # an aggregate without GROUP BY is always one row
    return row


# ---- the processors' quarantine ------------------------------------------------------------


async def quarantine_counts(db: Backend) -> list[Row]:
    """Records set aside, per processor, source topic and reason (for /metrics)."""
    return await db.fetchall("SELECT processor, source_topic, reason, count(*) AS n FROM quarantined GROUP BY 1, 2, 3")


# ---- Operation durations -------------------------------------------------------------------

OPERATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)  # seconds (for /metrics)


async def operation_durations(db: Backend) -> list[Row]:
    """Ended Operations per Space, kind and state: their count, total seconds, and how many
    took at most each of OPERATION_BUCKETS (`le_0` … in order)."""
    buckets = ", ".join(
        f"count(*) FILTER (WHERE updated_at - created_at <= make_interval(secs => {b})) AS le_{i}"
        for i, b in enumerate(OPERATION_BUCKETS)
    )
    return await db.fetchall(
        f"SELECT space, kind, state, count(*) AS n, "  # noqa: S608 (constant text, no input)
        f"coalesce(sum(extract(epoch FROM updated_at - created_at)), 0)::float8 AS seconds, {buckets} "
        "FROM operations WHERE state IN ('succeeded', 'failed') GROUP BY 1, 2, 3"
    )
