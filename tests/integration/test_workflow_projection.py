"""The workflow read models on a real PostgreSQL: instances, history rows, counts per status,
purges (WF-9, WF-13, WF-21, WF-47; host-api.md section 5)."""

import dataclasses
import json
from typing import Any

import psycopg
import pytest

from sumi.core import records as r
from sumi.core.canonical import parsed_canonical
from sumi_projections import workflow
from sumi_projections.control import ts

pytestmark = pytest.mark.integration

W = "res_wf"
T0 = 1_700_000_000_000


def created(iid: str, at: int = T0, wf: str = W) -> r.InstanceCreated:
    return r.InstanceCreated(wf, iid, "demo", at, json.dumps({"n": 1}), "alice")


def status(iid: str, value: str, at: int, **kw: Any) -> r.InstanceStatusChanged:
    return r.InstanceStatusChanged(W, iid, value, at, **kw)


def step(iid: str, at: int) -> r.StepAttemptCommitted:
    return r.StepAttemptCommitted(W, iid, "load", "do", 1, True, True, at, result='{"rows":3}', ownerToken="tok")


async def rows(cur: psycopg.AsyncCursor[Any], sql: str, *params: Any) -> list[tuple[Any, ...]]:
    await cur.execute(sql, params)  # type: ignore[arg-type]
    return await cur.fetchall()


async def counts(cur: psycopg.AsyncCursor[Any], wf: str = W) -> dict[str, int]:
    found = await rows(cur, "SELECT status, n FROM workflow_counts WHERE workflow_uid = %s", wf)
    return {s: n for s, n in found}


async def test_instance_history_and_counts(cur: psycopg.AsyncCursor[Any]) -> None:  # WF-9, WF-21
    log = [
        created("a"),
        created("b"),
        status("a", "running", T0 + 1),
        step("a", T0 + 2),
        status("a", "complete", T0 + 3, output='{"rows":3}'),
        status("b", "running", T0 + 4),
        status("b", "errored", T0 + 5, errorReason="run_threw", errorMessage="boom"),
    ]
    await workflow.apply_many(cur, [(rec, 0, i) for i, rec in enumerate(log)])
    assert await counts(cur) == {"complete": 1, "errored": 1}
    inst = await rows(
        cur,
        "SELECT instance_id, status, output, error_reason, error_message, history_seq FROM workflow_instances "
        "ORDER BY instance_id",
    )
    assert inst == [("a", "complete", {"rows": 3}, None, None, 4), ("b", "errored", None, "run_threw", "boom", 3)]
    history = await rows(cur, "SELECT seq, type, data FROM workflow_history WHERE instance_id = 'a' ORDER BY seq")
    assert [h[:2] for h in history] == [
        (1, "InstanceCreated"),
        (2, "InstanceStatusChanged"),
        (3, "StepAttemptCommitted"),
        (4, "InstanceStatusChanged"),
    ]
    assert history[0][2] == {"params": {"n": 1}, "principal": "alice"}
    assert history[2][2] == {
        "name": "load",
        "kind": "do",
        "attempt": 1,
        "ok": True,
        "final": True,
        "result": {"rows": 3},
    }  # documents as JSON, no owner token


async def test_each_record_applies_at_most_once(cur: psycopg.AsyncCursor[Any]) -> None:
    log = [(created("a"), 0, 10), (step("a", T0 + 1), 0, 11), (status("a", "running", T0 + 2), 0, 12)]
    await workflow.apply_many(cur, log)
    await workflow.apply_many(cur, log)  # a second delivery of the same offsets changes nothing
    for rec, p, o in log:
        await workflow.apply(cur, rec, p, o)
    assert await rows(cur, "SELECT count(*) FROM workflow_history") == [(3,)]
    assert await counts(cur) == {"running": 1}


async def test_purges(cur: psycopg.AsyncCursor[Any]) -> None:  # WF-13, WF-47
    await workflow.apply_many(cur, [(created("a"), 0, 0), (created("b"), 0, 1), (created("c", wf="res_other"), 0, 2)])
    await workflow.apply(cur, r.InstancePurged(W, "a", T0 + 9), 0, 3)  # retention: one instance
    assert await rows(cur, "SELECT instance_id FROM workflow_instances ORDER BY 1") == [("b",), ("c",)]
    assert await counts(cur) == {"queued": 1}
    await workflow.apply(cur, r.InstancesPurged(W, T0 + 10, "op_1"), 1, 0)  # the Workflow's delete
    # A record of another partition applied after the purge brings nothing back (UIDs are never reused).
    await workflow.apply(cur, created("late"), 2, 0)
    assert await rows(cur, "SELECT workflow_uid, instance_id FROM workflow_instances") == [("res_other", "c")]
    assert await rows(cur, "SELECT count(*) FROM workflow_history WHERE workflow_uid = %s", W) == [(0,)]
    assert await counts(cur) == {}
    assert await counts(cur, "res_other") == {"queued": 1}
    # Each partition that held instances has its marker (replicas share the partitions): applied
    # in any order, the tombstone keeps the earliest time, so a replay gives the same row.
    await workflow.apply(cur, r.InstancesPurged(W, T0 + 8, "op_1"), 3, 0)
    await workflow.apply(cur, r.InstancesPurged(W, T0 + 12, "op_1"), 2, 1)
    assert await rows(cur, "SELECT purged_at FROM workflow_purged WHERE workflow_uid = %s", W) == [(ts(T0 + 8),)]


async def test_decisions_reach_the_shared_table(cur: psycopg.AsyncCursor[Any]) -> None:
    decided = r.CommandDecided("wfc_x", "demo", "alice", "instance.create", True, 201, T0, result='{"id":"a"}')
    await workflow.apply(cur, decided, 0, 0)
    assert await rows(cur, "SELECT command_id, status, result FROM decisions") == [("wfc_x", 201, {"id": "a"})]


async def test_a_decision_comes_in_its_notification(cur: psycopg.AsyncCursor[Any], database_url: str) -> None:
    # WF-19, QC-46: the notification carries the row the gateway would read; a retry decided
    # again notifies its ID only (the row keeps the first decision), and so does a decision
    # too large for a notification.
    first = r.CommandDecided(
        "wfc_x", "demo", "alice", "instance.create", True, 201, T0, result='{"id":"a","n":[1,2.5]}'
    )
    again = dataclasses.replace(first, accepted=False, status=409, result=None, problem='{"type":"x"}')
    big = r.CommandDecided(
        "wfc_big", "demo", "alice", "instance.create", True, 201, T0, result=json.dumps({"id": "x" * 9000})
    )
    schema = (await rows(cur, "SELECT current_schema()"))[0][0]
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as listener:
        await listener.execute(f'LISTEN "sumi_decided_{schema}"')
        await workflow.apply_many(cur, [(first, 0, 0), (again, 0, 1), (big, 0, 2)])
        await workflow.apply(cur, again, 0, 3)
        notes = [n.payload async for n in listener.notifies(timeout=5, stop_after=3)]
    await cur.execute("SELECT command_id, accepted, status, operation_id, problem, result FROM decisions ORDER BY 1")
    stored = {
        row[0]: dict(zip([c.name for c in cur.description or ()], row, strict=True)) for row in await cur.fetchall()
    }
    whole = [json.loads(n) for n in notes if n.startswith("{")]
    assert whole == [stored["wfc_x"]] and whole[0]["result"] == {"id": "a", "n": [1, 2.5]}
    assert sorted(n for n in notes if not n.startswith("{")) == ["wfc_big", "wfc_x"]


IGNORED = 'ignored ,"sequence":\x00 "\u00e9\n\u2028'  # a type whose canonical text escapes some of it
# Payloads with what the history's text edit must see through: the member names it looks for,
# NUL (\u0000, which Postgres's json operators refuse) and an escaped backslash before "u0000".
TRICKY = {"a": {"b": 1, "sequence": 5}, "x": "\x00", "y": "\\u0000"}


def busy_log() -> list[Any]:
    """Instance a's whole life with an unmatched event, b's create and two steps, c advanced from
    rows written before (created in `settled`), interleaved as the engine's commits are."""
    log: list[Any] = [created("a"), created("b", at=T0 + 1), status("c", "running", T0 + 1)]
    log += [r.InstanceContextStarted(W, "a", "tok", "ver_1", 1, T0 + 2), status("a", "running", T0 + 2)]
    log += [r.EventAccepted(W, "a", 1, "approved", 12, T0 + 3, payload=parsed_canonical({"by": "me", **TRICKY}))]
    log += [r.EventAccepted(W, "a", 2, IGNORED, 14, T0 + 3, payload=parsed_canonical(TRICKY))]
    for n in range(12):
        log += [step("a", T0 + 4 + n), step("b", T0 + 4 + n) if n < 2 else step("c", T0 + 4 + n)]
    log += [
        r.StepAttemptCommitted(
            W, "a", "wait", "wait", 1, True, True, T0 + 20, result=parsed_canonical(TRICKY), eventSequence=1
        ),
        r.SleepScheduled(W, "a", "nap", T0 + 99, "tok", T0 + 21),
        status("a", "sleeping", T0 + 21),
        status("a", "running", T0 + 99),
        status("c", "errored", T0 + 30, errorReason="step_failed", errorMessage="no"),
        status("a", "complete", T0 + 100, output='{"rows":3}'),
    ]
    return log


async def read_model(cur: psycopg.AsyncCursor[Any]) -> list[list[tuple[Any, ...]]]:
    return [
        await rows(cur, "SELECT * FROM workflow_instances ORDER BY instance_id"),
        await rows(
            cur, "SELECT workflow_uid, instance_id, seq, type, at, data::text FROM workflow_history ORDER BY 2, 3"
        ),
        await rows(cur, "SELECT * FROM workflow_counts ORDER BY status"),
    ]


WRITES = "SELECT n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'workflow_instances'::regclass"


async def test_a_batch_lands_as_its_records_one_by_one(cur: psycopg.AsyncCursor[Any]) -> None:
    # WF-21, WF-25, WF-9: one batch with many updates of one instance writes each instance's
    # row once (the last state in log order wins) and keeps every history row, exactly as the
    # same records applied one at a time.
    settled = [(created("c"), 0, 0)]
    log = [(rec, 0, o) for o, rec in enumerate(busy_log(), start=1)]
    for rec, p, o in [*settled, *log]:
        await workflow.apply(cur, rec, p, o)
    one_by_one = await read_model(cur)
    for table in ("workflow_history", "workflow_instances", "workflow_counts"):
        await cur.execute(f"DELETE FROM {table}")  # type: ignore[arg-type]
    await workflow.apply_many(cur, settled)
    async with cur.connection.transaction():  # the backend's counts of row writes not yet reported
        before = await rows(cur, WRITES)
        await workflow.apply_many(cur, log)
        after = await rows(cur, WRITES)
    assert await read_model(cur) == one_by_one
    assert (after[0][0] - before[0][0], after[0][1] - before[0][1]) == (2, 1)  # a and b inserted whole, c updated once
    assert [i[1:4] for i in one_by_one[0]] == [
        ("a", "demo", "complete"),
        ("b", "demo", "queued"),
        ("c", "demo", "errored"),
    ]
    assert len(one_by_one[1]) == len(busy_log()) + 1  # every record a history row, and c's create
    events = [d for *_, y, _, d in one_by_one[1] if y == "EventAccepted"]
    # the consumed event keeps its payload; the other's row is what the record without it would give
    assert events == [
        parsed_canonical({"payload": {"by": "me", **TRICKY}, "sequence": 1, "size": 12, "type": "approved"}),
        parsed_canonical({"sequence": 2, "size": 14, "type": IGNORED}),
    ]
