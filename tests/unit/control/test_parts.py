"""Reports per partition of the instance log, as the control processor decides them: a
DurableWorkflow's instance counts (WF-9) kept per partition and observed as their sum, and a
delete Operation's shares (WF-13), each counted once, the Operation succeeding with the last."""

import json
from typing import Any

import pytest

from sumi.control import ControlState, evolve
from sumi.control.rules.forms.durable_workflow import STATUSES
from sumi.control.rules.forms.names import DURABLE_WORKFLOW
from sumi.core import commands as c
from sumi.core import records as r
from sumi.core.problems import Problem
from tests.decisions_kit import (
    LOG,
    cmd,
    code,
    create,
    delete,
    deploy,
    new_state,
    observed,
    op_state,
    reply,
    res,
    run,
    verified,
    worker,
)

ZERO = dict.fromkeys(STATUSES, 0)
PARTS = 4


def _workflow() -> tuple[ControlState, str]:
    LOG.clear()
    s = new_state()
    w = worker(s)
    deploy(s, w, (verified(s, w, classes=("Flow",)), 100))
    create(s, "wf", DURABLE_WORKFLOW, {"worker": {"resourceUid": w}, "className": "Flow"})
    return s, str(res(s, "wf").uid)


def _counts(s: ControlState, uid: str, partition: int, **counts: int) -> list[Any]:
    payload = {"uid": uid, "observed": {"instanceCounts": {**ZERO, **counts}}, "partition": partition}
    return run(s, cmd("resource.observe", payload))


def _part(s: ControlState, op_id: str, partition: int, partitions: int = PARTS) -> list[Any]:
    payload = {"operationId": op_id, "outcome": "succeeded", "partition": partition, "partitions": partitions}
    return run(s, cmd("operation.report", payload))


def _rebuilt(s: ControlState) -> ControlState:
    again = ControlState()
    for rec in LOG:
        evolve(again, rec)
    assert again == s  # the fold of the control log is the live state: a restart loses nothing
    return again


def test_the_observed_counts_are_the_sum_of_the_partitions() -> None:  # WF-9
    s, uid = _workflow()
    _counts(s, uid, 0, running=2, complete=1)
    _counts(s, uid, 3, running=1, queued=4)
    assert observed(s, "wf")["instanceCounts"] == {**ZERO, "running": 3, "complete": 1, "queued": 4}
    _counts(s, uid, 0, complete=3)  # partition 0's latest replaces its earlier counts
    assert observed(s, "wf")["instanceCounts"] == {**ZERO, "running": 1, "complete": 3, "queued": 4}
    _counts(s, uid, 3)  # purged there: zeros, not left counting them
    assert observed(s, "wf")["instanceCounts"] == {**ZERO, "complete": 3}
    assert s.space("demo").instance_counts[uid] == {0: {**ZERO, "complete": 3}}
    _rebuilt(s)


def test_the_observed_shows_no_partition() -> None:  # WF-9
    # What the HTTP API returns is the ResourceObserved's observed: the three fields, word for word
    s, uid = _workflow()
    events = _counts(s, uid, 1, waiting=2)
    seen = json.loads(next(e for e in events if isinstance(e, r.ResourceObserved)).observed)
    assert set(seen) == {"ready", "instanceCounts", "observedAt"} and seen["ready"] is True
    assert seen["instanceCounts"] == {**ZERO, "waiting": 2}
    assert [type(e) for e in events] == [r.InstanceCountsObserved, r.ResourceObserved]


def test_a_report_equal_to_what_is_kept_writes_nothing() -> None:  # WF-9
    s, uid = _workflow()
    assert _counts(s, uid, 2) == []  # a partition never reported holds zeros
    assert len(_counts(s, uid, 2, running=1)) == 2
    assert _counts(s, uid, 2, running=1) == []  # the same again (a new replica of the partition)


def test_counts_of_a_partition_go_with_the_workflow() -> None:  # WF-9, WF-15
    s, uid = _workflow()
    _counts(s, uid, 1, complete=2)
    op_id = str(reply(delete(s, "wf")).operationId)
    for partition in range(PARTS):
        _part(s, op_id, partition)
    assert res(s, "wf") is None and uid not in s.space("demo").instance_counts
    _rebuilt(s)


def test_only_a_workflow_reports_counts_per_partition() -> None:  # WF-9
    s = new_state()
    w = worker(s)
    assert code(run(s, cmd("resource.observe", {"uid": w, "observed": {}, "partition": 0}))) == "invalid_request"


def test_the_delete_succeeds_once_every_partition_has_reported() -> None:  # WF-13
    s, uid = _workflow()
    events = delete(s, "wf")
    op_id = str(reply(events).operationId)
    for partition in (2, 0, 3):
        assert [type(e) for e in _part(s, op_id, partition)] == [r.OperationPartSucceeded]
        assert op_state(s, events) == "running" and res(s, "wf").state == "deleting"
    last = _part(s, op_id, 1)
    assert [type(e) for e in last] == [r.OperationPartSucceeded, r.ResourceDeleted, r.OperationStateChanged]
    assert op_state(s, events) == "succeeded" and res(s, "wf") is None
    assert _part(s, op_id, 1) == [] and _part(s, op_id, 0) == []  # after it ended: nothing
    _rebuilt(s)


def test_a_part_reported_twice_counts_once() -> None:  # WF-13
    s, _ = _workflow()
    events = delete(s, "wf")
    op_id = str(reply(events).operationId)
    _part(s, op_id, 0)
    assert _part(s, op_id, 0) == []  # again, after a crash or a rebalance
    for partition in (1, 2):
        _part(s, op_id, partition)
    assert op_state(s, events) == "running" and s.space("demo").operations[op_id].parts_done == {0, 1, 2}
    _rebuilt(s)  # the parts are in the control log: a restarted processor still has them
    _part(s, op_id, 3)
    assert op_state(s, events) == "succeeded"


def test_parts_go_on_while_the_delete_reconciles() -> None:  # WF-13, WF-14
    s, _ = _workflow()
    events = delete(s, "wf")
    op_id = str(reply(events).operationId)
    _part(s, op_id, 0, partitions=2)
    problem_json = {"code": "backend_unavailable", "status": 503, "detail": "stop not confirmed"}
    reconciling = {"operationId": op_id, "outcome": "reconciling", "effect": "unknown", "error": problem_json}
    run(s, cmd("operation.report", reconciling))
    assert op_state(s, events) == "reconciling"
    assert [type(e) for e in run(s, cmd("operation.report", reconciling))] == [r.OperationStateChanged]  # as ever
    _part(s, op_id, 1, partitions=2)
    assert op_state(s, events) == "succeeded" and res(s, "wf") is None


def test_a_whole_report_still_ends_the_operation() -> None:  # WF-13
    # A payload written before parts existed: one report for every partition
    s, _ = _workflow()
    events = delete(s, "wf")
    payload = {"operationId": str(reply(events).operationId), "outcome": "succeeded", "effect": "complete"}
    run(s, cmd("operation.report", payload))
    assert op_state(s, events) == "succeeded"


def test_old_payloads_decode_and_parts_are_checked() -> None:  # WF-9, WF-13
    old = c.decode("operation.report", '{"operationId":"op_1","outcome":"succeeded","effect":"complete"}')
    assert isinstance(old, c.OperationReport) and old.partition is None and old.partitions is None
    seen = c.decode("resource.observe", '{"uid":"res_1","observed":{}}')
    assert isinstance(seen, c.ResourceObserve) and seen.partition is None
    for bad in (
        '{"operationId":"op_1","outcome":"succeeded","partition":0}',
        '{"operationId":"op_1","outcome":"succeeded","partition":4,"partitions":4}',
        '{"operationId":"op_1","outcome":"failed","partition":0,"partitions":4}',
    ):
        with pytest.raises(Problem):
            c.decode("operation.report", bad)
    with pytest.raises(Problem):
        c.decode("resource.observe", '{"uid":"res_1","observed":{},"partition":-1}')
