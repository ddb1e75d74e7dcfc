"""The control processor's pure decisions, without a broker."""

from typing import Any

from sumi.control import ControlState, decide, evolve
from sumi.control.rules.forms.names import MODULE_WORKER, QUEUE, QUEUE_CONSUMER
from sumi.core import records as r
from tests.decisions_kit import NOW, command, problem, reply, run


def cmd(
    kind: str,
    payload: dict[str, Any],
    *,
    space: str = "demo",
    key: str | None = None,
    fp: str | None = None,
    cid: str = "c1",
    principal: str = "alice",
) -> r.CommandSubmitted:
    return command(kind, payload, space=space, key=key, fp=fp, cid=cid, principal=principal)


def with_space() -> ControlState:
    s = ControlState()
    run(s, cmd("space.create", {"name": "demo"}))
    return s


def create_queue(s: ControlState, name: str = "q", cid: str = "c2", **kw: Any) -> list[Any]:
    return run(
        s, cmd("resource.create", {"name": name, "form": QUEUE, "spec": {"retentionSeconds": 3600}}, cid=cid, **kw)
    )


def test_space_name_conflict() -> None:
    s = with_space()
    assert problem(run(s, cmd("space.create", {"name": "demo"}, cid="x")))["code"] == "name_conflict"


def test_create_runs_pending_then_succeeds() -> None:
    s = with_space()
    events = create_queue(s)
    states = [e.state for e in events if isinstance(e, r.OperationStateChanged)]
    assert states == ["running", "succeeded"]
    assert reply(events).status == 202
    res = s.space("demo").by_ref("q")
    assert res is not None and res.state == "active" and res.uid == "res_c2"


def test_same_idempotency_key_same_operation_other_body_422() -> None:
    # QC-46: the same key and request is the same Operation, never a second Resource.
    s = with_space()
    first = reply(create_queue(s, key="k1", fp="f1"))
    again = run(
        s,
        cmd(
            "resource.create",
            {"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 3600}},
            cid="c3",
            key="k1",
            fp="f1",
        ),
    )
    assert reply(again).operationId == first.operationId
    assert len(s.space("demo").resources) == 1
    other = run(
        s,
        cmd(
            "resource.create",
            {"name": "q2", "form": QUEUE, "spec": {"retentionSeconds": 60}},
            cid="c4",
            key="k1",
            fp="f2",
        ),
    )
    assert problem(other)["code"] == "idempotency_key_reused"


def test_name_conflict_and_unsupported_form_and_invalid_spec() -> None:
    s = with_space()
    create_queue(s)
    assert problem(create_queue(s, cid="c9"))["code"] == "name_conflict"
    p = problem(run(s, cmd("resource.create", {"name": "x", "form": "https://example/", "spec": {}})))
    assert p["code"] == "unsupported_form"
    p = problem(
        run(s, cmd("resource.create", {"name": "x", "form": QUEUE, "spec": {"retentionSeconds": 59, "extra": 1}}))
    )
    assert p["code"] == "invalid_spec"
    assert {e["path"] for e in p["errors"]} == {"/spec/retentionSeconds", "/spec/extra"}


def test_private_inputs_rejected() -> None:
    # QC-10
    s = with_space()
    p = problem(
        run(
            s,
            cmd(
                "resource.create",
                {"name": "x", "form": QUEUE, "privateInputs": {"a": 1}, "spec": {"retentionSeconds": 60}},
            ),
        )
    )
    assert p["code"] == "invalid_spec" and p["errors"][0]["path"] == "/privateInputs"


def test_rejection_changes_nothing() -> None:
    # QC-20: a rejected command leaves only its own decision record.
    s = with_space()
    events = run(s, cmd("resource.create", {"name": "x", "form": QUEUE, "spec": {}}))
    assert [type(e) for e in events] == [r.CommandDecided]
    assert not s.space("demo").resources


def test_update_bumps_generation_and_delete_releases_name() -> None:
    s = with_space()
    create_queue(s)
    run(s, cmd("resource.update", {"ref": "q", "spec": {"retentionSeconds": 60}}, cid="u1"))
    assert s.space("demo").by_ref("q").generation == 2  # type: ignore[union-attr]
    run(s, cmd("resource.delete", {"ref": "res_c2"}, cid="d1"))
    assert s.space("demo").by_ref("q") is None
    assert reply(create_queue(s, cid="c5")).accepted


def test_space_delete_refused_while_it_holds_resources() -> None:
    s = with_space()
    create_queue(s)
    assert problem(run(s, cmd("space.delete", {"name": "demo"}, cid="sd")))["code"] == "dependency_conflict"


def test_resource_busy_while_an_operation_is_unfinished() -> None:
    s = with_space()
    d = decide(s, cmd("resource.create", {"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}}), NOW)
    for e in d.events:
        evolve(s, e)  # accepted, but its apply has not run yet
    p = problem(run(s, cmd("resource.delete", {"ref": "q"}, cid="d2")))
    assert p["code"] == "resource_busy"


def test_apply_twice_does_nothing_twice() -> None:
    # QC-48: a follow-up redelivered after a crash finds its Operation finished.
    s = with_space()
    d = decide(s, cmd("resource.create", {"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}}), NOW)
    for e in d.events:
        evolve(s, e)
    apply = d.followups[0]
    first = run(s, apply)
    assert any(isinstance(e, r.OperationStateChanged) and e.state == "succeeded" for e in first)
    assert run(s, apply) == []


def test_worker_delete_blocked_by_reference() -> None:
    # QC-50: a worker a QueueConsumer references cannot be deleted; an unreferenced one can.
    s = with_space()
    create_queue(s)
    for name, cid in (("w", "w1"), ("lone", "w2")):
        worker = {"name": name, "form": MODULE_WORKER, "spec": {"runtime": "javascript", "handlers": ["queue"]}}
        assert reply(run(s, cmd("resource.create", worker, cid=cid))).accepted
    consumer = {
        "queue": {"resourceUid": "res_c2"},
        "worker": {"resourceUid": "res_w1"},
        "maxBatchSize": 10,
        "maxBatchTimeoutSeconds": 0,
        "maxConcurrency": 1,
        "maxRetries": 3,
        "retryDelaySeconds": 0,
    }
    assert reply(
        run(s, cmd("resource.create", {"name": "c", "form": QUEUE_CONSUMER, "spec": consumer}, cid="k1"))
    ).accepted

    events = run(s, cmd("resource.delete", {"ref": "w"}, cid="d1"))
    p = problem(events)
    assert p["code"] == "dependency_conflict" and "res_k1" in p["detail"], p
    assert [type(e) for e in events] == [r.CommandDecided]  # QC-20: nothing else changed
    assert s.space("demo").by_ref("w").state == "active"  # type: ignore[union-attr]
    assert reply(run(s, cmd("resource.delete", {"ref": "lone"}, cid="d2"))).accepted
    assert s.space("demo").by_ref("lone") is None


def test_grant_to_missing_space_rejected() -> None:
    s = with_space()
    p = problem(
        run(
            s,
            cmd(
                "token.create",
                {"principal": "bob", "admin": False, "tokenHash": "h", "grants": [{"space": "nope", "role": "editor"}]},
                space="",
            ),
        )
    )
    assert p["code"] == "invalid_request"


def test_awaited_operation_ends_by_report() -> None:
    # QC-47, QC-48: an Operation with an outside effect stays running until its owner reports.
    from sumi.control.rules.forms import FORMS

    s = with_space()
    form = FORMS[QUEUE]
    form.completion = lambda kind, registry, resource: "await"  # type: ignore[method-assign]
    try:
        events = create_queue(s)
    finally:
        del form.completion
    op_id = reply(events).operationId
    assert s.space("demo").operations[op_id].state == "running"
    assert s.space("demo").by_ref("q").state == "creating"  # type: ignore[union-attr]
    rec = run(
        s, cmd("operation.report", {"operationId": op_id, "outcome": "reconciling", "effect": "unknown"}, cid="r0")
    )
    assert rec[-1].state == "reconciling" and rec[-1].effect == "unknown"
    failed = run(
        s,
        cmd(
            "operation.report", {"operationId": op_id, "outcome": "failed", "error": {"code": "invalid_spec"}}, cid="r1"
        ),
    )
    assert [type(e) for e in failed] == [r.ResourceDeleted, r.OperationStateChanged]
    assert s.space("demo").by_ref("q") is None  # a failed create frees the name
    assert run(s, cmd("operation.report", {"operationId": op_id, "outcome": "succeeded"}, cid="r2")) == []


def test_observe_records_only_changes() -> None:
    s = with_space()
    create_queue(s)
    first = run(s, cmd("resource.observe", {"uid": "res_c2", "observed": {"ready": 1}}, cid="o1"))
    assert len(first) == 1
    assert run(s, cmd("resource.observe", {"uid": "res_c2", "observed": {"ready": 1}}, cid="o2")) == []
