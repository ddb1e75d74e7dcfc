"""A Workflow's delete (`sumi.workflow._deletes`), alone: in each partition a replica owns,
contexts stopped first, then the partition's instances purged and its share reported once the
purges have committed; an unconfirmed stop reconciles. Through fake replicas with real instance
tables and one real control state (`replicas_kit`), with a clock the test sets."""

import asyncio

from sumi.core import records as r
from sumi.core.commands import OperationReport
from sumi.wire.topics import instance_key
from sumi.workflow._deletes import STOP_PROOF_MS, Deletes
from tests.decisions_kit import delete, reply
from tests.unit.workflow.replicas_kit import PARTITIONS, FakeRun, Replica, seed, workflow


def _reports(replica: Replica) -> list[tuple[str, int | None]]:
    return [(x.outcome, x.partition) for x in replica.commands if isinstance(x, OperationReport)]


def _op_state(replica: Replica, op_id: str) -> str:
    return replica.control.state.space("demo").operations[op_id].state


def _deleting(instances: int, *owned: tuple[int, ...]) -> tuple[list[Replica], str, str]:
    """Replicas owning `owned` (one of all partitions by default), a Workflow with instances
    spread over them and its delete started: (replicas, Workflow UID, delete Operation)."""
    s, uid = workflow()
    replicas = [Replica(s, o) for o in owned or (tuple(range(PARTITIONS)),)]
    seed(replicas, uid, ["running"] * instances)
    op_id = str(reply(delete(s, "wf")).operationId)
    return replicas, uid, op_id


async def test_a_delete_purges_once_every_context_has_stopped() -> None:  # WF-13
    # contexts stopped first; then every instance purged and the delete reported, once
    (engine,), uid, op_id = _deleting(3)
    live = instance_key(uid, "i1")
    run = engine.runs[live] = FakeRun()
    deletes = Deletes(engine)  # type: ignore[arg-type]
    deletes.step()
    waiting = engine.table.partition_of(live)
    assert run.stops == 1 and {engine.table.partition_of(k) for k in engine.table.instances} == {waiting}
    assert _op_state(engine, op_id) == "running"
    del engine.runs[live]  # its stop is confirmed
    deletes.step()
    await asyncio.sleep(0)
    assert engine.table.instances == {} and _op_state(engine, op_id) == "succeeded"
    assert sorted(p for _, p in _reports(engine)) == list(range(PARTITIONS))  # each partition once
    deletes.step()
    await asyncio.sleep(0)
    assert len(_reports(engine)) == PARTITIONS


async def test_a_partition_is_reported_only_once_its_purges_committed() -> None:  # WF-13
    (engine,), uid, op_id = _deleting(6)
    engine.auto_commit = False
    deletes = Deletes(engine)  # type: ignore[arg-type]
    deletes.step()
    await asyncio.sleep(0)
    with_instances = {engine.table.partition_of(instance_key(uid, f"i{n}")) for n in range(6)}
    # a partition without instances reports at once; the others wait for their purges' commit
    assert {p for _, p in _reports(engine)} == set(range(PARTITIONS)) - with_instances
    engine.commit()
    await asyncio.sleep(0)
    assert {p for _, p in _reports(engine)} == set(range(PARTITIONS)) and _op_state(engine, op_id) == "succeeded"
    markers = [x for x in engine.decided if isinstance(x, r.OperationPartSucceeded)]
    assert len(markers) == PARTITIONS


async def test_two_replicas_end_in_one_succeeded_delete() -> None:  # WF-13
    # each replica purges and reports only its own partitions; a replica that takes a partition
    # over (a rebalance) reports it again, which counts once
    (a, b), uid, op_id = _deleting(8, (0, 1), (2, 3))
    deletes_a, deletes_b = Deletes(a), Deletes(b)  # type: ignore[arg-type]
    deletes_a.step()
    await asyncio.sleep(0)
    assert a.table.instances == {} and b.table.instances != {} and _op_state(a, op_id) == "running"
    deletes_b.step()
    await asyncio.sleep(0)
    assert b.table.instances == {} and _op_state(b, op_id) == "succeeded"
    ended = [x for x in a.decided + b.decided if isinstance(x, r.OperationStateChanged)]
    assert [x.state for x in ended] == ["succeeded"]
    later = Replica(a.control.state, (1, 2))  # a fresh replica: the Resource is gone, nothing to do
    Deletes(later).step()  # type: ignore[arg-type]
    assert later.commands == []


async def test_a_part_reported_again_by_a_new_owner_counts_once() -> None:  # WF-13
    (a, b), uid, op_id = _deleting(4, (0, 1), (2, 3))
    b.runs.update({k: FakeRun() for k in b.table.instances})  # b's partitions wait for their stops
    empty = {2, 3} - {b.table.partition_of(k) for k in b.table.instances}  # these report at once
    Deletes(a).step()  # type: ignore[arg-type]
    Deletes(b).step()  # type: ignore[arg-type]
    await asyncio.sleep(0)
    parts = a.control.state.space("demo").operations[op_id].parts_done
    assert parts == {0, 1} | empty and empty != {2, 3}
    again = Replica(a.control.state, (0, 1))  # a's partitions after a rebalance: purged, reported again
    Deletes(again).step()  # type: ignore[arg-type]
    assert _reports(again) == [("succeeded", 0), ("succeeded", 1)] and again.decided == []
    b.runs.clear()
    Deletes(b).step()  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert _op_state(b, op_id) == "succeeded"


async def test_a_stop_not_confirmed_in_time_reconciles_by_the_runtimes_exit() -> None:  # WF-13, WF-14
    # the delete does not succeed while the stop is unproven; the same Operation reports
    # reconciling once, the runtimes restart, and it succeeds after
    (engine,), uid, op_id = _deleting(1)
    live = instance_key(uid, "i0")
    engine.runs[live] = FakeRun()
    deletes = Deletes(engine)  # type: ignore[arg-type]
    deletes.step()
    engine.clock += STOP_PROOF_MS - 1
    deletes.step()
    assert [o for o, _ in _reports(engine)] == ["succeeded"] * (PARTITIONS - 1)  # every partition but i0's
    engine.clock += 1
    deletes.step()
    await asyncio.sleep(0)
    engine.clock += 1
    deletes.step()
    await asyncio.sleep(0)
    assert [o for o, _ in _reports(engine)].count("reconciling") == 1 and engine.restarts == 1
    assert _op_state(engine, op_id) == "reconciling"
    engine.restarted.set()
    del engine.runs[live]  # the runtime's exit took the context with it
    deletes.step()
    await asyncio.sleep(0)
    assert _op_state(engine, op_id) == "succeeded" and engine.table.instances == {}
