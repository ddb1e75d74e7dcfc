"""WorkerVersion 0.5.0 and WorkerDeployment 0.4.0 in the control processor's pure decisions."""

import json
from dataclasses import replace
from typing import Any

import pytest

from sumi.control import ControlState, decide, evolve
from sumi.control.rules.forms import FORMS
from sumi.control.rules.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.control.rules.forms.worker_deployment import active_allocation, allocations_to_check
from sumi.core import records as r
from tests.decisions_kit import (
    GOOD_JS,
    LOG,
    NOW,
    cmd,
    code,
    create,
    delete,
    deploy,
    deployment_spec,
    new_state,
    observed,
    op_state,
    paths,
    problem,
    put,
    reply,
    report,
    res,
    run,
    verified,
    version,
    version_spec,
    worker,
)


@pytest.fixture(autouse=True)
def _fresh_log() -> None:
    LOG.clear()


# ---- WorkerVersion: shape ----------------------------------------------------------------------


def validate_version(spec: Any) -> set[str]:
    return {e.path for e in FORMS[WORKER_VERSION].validate_spec(spec)}


def test_version_good_spec_has_no_errors() -> None:
    spec = version_spec(
        "res_w",
        vars={"GREETING": "hi"},
        queueBindings=[{"name": "OUT", "queue": {"resourceUid": "res_q"}}],
        workflowBindings=[{"name": "REPORTS", "resource": {"resourceUid": "res_f"}}],
        modules=[
            {"name": "worker.js", "content": GOOD_JS},
            {"name": "lib/util.mjs", "content": "export const x = 1;"},
        ],
    )
    assert validate_version(spec) == set()


def test_version_spec_is_closed_and_requires_its_fields() -> None:
    assert validate_version({"extra": 1}) == {
        "/spec/extra",
        "/spec/worker",
        "/spec/mainModule",
        "/spec/modules",
    }
    assert validate_version([]) == {"/spec"}
    assert validate_version(version_spec("res_w", worker={"resourceUid": "res_w", "x": 1})) == {"/spec/worker/x"}
    assert validate_version(version_spec("res_w", worker={"resourceUid": ""})) == {"/spec/worker/resourceUid"}


@pytest.mark.parametrize(
    "name",
    [
        "/worker.js",
        "../worker.js",
        "a/../worker.js",
        "a//worker.js",
        "./worker.js",
        "worker.ts",
        "",
        "a\\b.js",
        7,
        "x" * 300 + ".js",
    ],
)
def test_version_module_names_are_relative_code_paths(name: Any) -> None:
    spec = version_spec(
        "res_w",
        mainModule="worker.js",
        modules=[{"name": "worker.js", "content": ""}, {"name": name, "content": ""}],
    )
    assert validate_version(spec) == {"/spec/modules/1/name"}


def test_version_modules_rules() -> None:
    assert validate_version(version_spec("res_w", modules=[])) == {"/spec/modules"}
    assert validate_version(version_spec("res_w", modules={"worker.js": ""})) == {"/spec/modules"}
    dup = [{"name": "worker.js", "content": ""}, {"name": "worker.js", "content": ""}]
    assert validate_version(version_spec("res_w", modules=dup)) == {"/spec/modules/1/name"}
    assert validate_version(version_spec("res_w", modules=[{"name": "worker.js", "content": 1}])) == {
        "/spec/modules/0/content"
    }
    assert validate_version(version_spec("res_w", modules=[{"name": "worker.js"}])) == {"/spec/modules/0/content"}
    assert validate_version(version_spec("res_w", mainModule="main.js")) == {"/spec/mainModule"}
    assert validate_version(version_spec("res_w", mainModule="")) == {"/spec/mainModule"}


def test_version_total_module_size_is_at_most_10_mib() -> None:
    half = "x" * (5 * 1024 * 1024)
    ok = [{"name": "worker.js", "content": half}, {"name": "b.js", "content": half}]
    assert validate_version(version_spec("res_w", modules=ok)) == set()
    over = [{"name": "worker.js", "content": half}, {"name": "b.js", "content": half + "é"}]
    assert validate_version(version_spec("res_w", modules=over)) == {"/spec/modules"}


def test_version_vars_and_binding_names() -> None:
    assert validate_version(version_spec("res_w", vars={"A": 1})) == {"/spec/vars/A"}
    assert validate_version(version_spec("res_w", vars=["A"])) == {"/spec/vars"}
    assert validate_version(version_spec("res_w", vars={"1A": "x"})) == {"/spec/vars/1A"}
    assert validate_version(version_spec("res_w", vars={"A" * 65: "x"})) == {"/spec/vars/" + "A" * 65}
    assert validate_version(version_spec("res_w", vars={"_a9": "x"})) == set()
    clash = version_spec(
        "res_w",
        vars={"OUT": "x"},
        queueBindings=[{"name": "OUT", "queue": {"resourceUid": "res_q"}}],
        workflowBindings=[{"name": "OUT", "resource": {"resourceUid": "res_f"}}],
    )
    assert validate_version(clash) == {
        "/spec/queueBindings/0/name",
        "/spec/workflowBindings/0/name",
    }
    bad = version_spec(
        "res_w",
        queueBindings=[{"name": "OUT", "queue": "q", "x": 1}],
        workflowBindings=[{"resource": {"resourceUid": "res_f"}}],
    )
    assert validate_version(bad) == {
        "/spec/queueBindings/0/queue",
        "/spec/queueBindings/0/x",
        "/spec/workflowBindings/0/name",
    }
    assert validate_version(version_spec("res_w", queueBindings={})) == {"/spec/queueBindings"}


# ---- WorkerVersion: references, create, PUT, delete ------------------------------------------


def test_version_create_is_awaited_and_verifying() -> None:
    s = new_state()
    w = worker(s)
    events = create(s, "v1", WORKER_VERSION, version_spec(w))
    assert reply(events).status == 202
    v = res(s, "v1")
    # forms.md: while verifying the create Operation is running, the Resource creating,
    # observed {"verified": false}.
    assert op_state(s, events) == "running"
    assert v.state == "creating" and dict(v.observed) == {"verified": False}
    created = [type(e) for e in events]
    assert created.index(r.ResourceObserved) == created.index(r.ResourceCreated) + 1
    report(s, str(reply(events).operationId), classes=("ReportWorkflow",))
    v = res(s, "v1")
    assert v.state == "active" and op_state(s, events) == "succeeded"
    assert dict(v.observed) == {
        "verified": True,
        "handlers": ["queue"],
        "workflowClasses": ["ReportWorkflow"],
    }


def test_failed_verification_leaves_no_version() -> None:
    s = new_state()
    w = worker(s)
    uid, op_id = version(s, w)
    events = report(s, op_id, ok=False, load_error="SyntaxError: Unexpected end of input")
    assert res(s, uid) is None and res(s, "v1") is None
    assert s.space("demo").operations[op_id].state == "failed"
    assert any(isinstance(e, r.ResourceDeleted) for e in events)
    version(s, w)  # the name is free again


def test_version_references() -> None:
    s = new_state()
    w = worker(s)
    run(s, cmd("resource.create", {"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}}))
    q = res(s, "q").uid
    assert code(create(s, "v", WORKER_VERSION, version_spec("res_nope"))) == "dependency_conflict"
    assert code(create(s, "v", WORKER_VERSION, version_spec(q))) == "dependency_conflict"
    bindings = [{"name": "OUT", "queue": {"resourceUid": "res_missing"}}]
    assert code(create(s, "v", WORKER_VERSION, version_spec(w, queueBindings=bindings))) == "dependency_conflict"
    bindings = [{"name": "OUT", "queue": {"resourceUid": w}}]  # a worker is no queue
    assert code(create(s, "v", WORKER_VERSION, version_spec(w, queueBindings=bindings))) == "dependency_conflict"
    bindings = [{"name": "REPORTS", "resource": {"resourceUid": q}}]  # a queue is no workflow
    assert code(create(s, "v", WORKER_VERSION, version_spec(w, workflowBindings=bindings))) == "dependency_conflict"
    ok = [{"name": "OUT", "queue": {"resourceUid": q}}]
    assert reply(create(s, "v", WORKER_VERSION, version_spec(w, queueBindings=ok))).accepted
    assert not s.space("demo").by_ref("nothing")


def test_version_modules_must_fit_the_worker_runtime() -> None:
    s = new_state()
    js = worker(s, "wjs")
    py = worker(s, "wpy", runtime="python")
    events = create(
        s,
        "v",
        WORKER_VERSION,
        version_spec(
            js,
            mainModule="worker.js",
            modules=[
                {"name": "worker.js", "content": GOOD_JS},
                {"name": "helper.py", "content": ""},
            ],
        ),
    )
    assert code(events) == "invalid_spec" and paths(events) == {"/spec/modules/1/name"}
    events = create(s, "v", WORKER_VERSION, version_spec(py))
    assert code(events) == "invalid_spec" and paths(events) == {"/spec/modules/0/name"}
    assert reply(
        create(
            s,
            "v",
            WORKER_VERSION,
            version_spec(py, mainModule="worker.py", modules=[{"name": "worker.py", "content": "x = 1"}]),
        )
    ).accepted
    assert reply(
        create(
            s,
            "v2",
            WORKER_VERSION,
            version_spec(js, mainModule="a.mjs", modules=[{"name": "a.mjs", "content": GOOD_JS}]),
        )
    ).accepted


def test_version_put_only_identical() -> None:
    s = new_state()
    w = worker(s)
    uid = verified(s, w)
    events = put(s, uid, version_spec(w))
    assert reply(events).accepted and res(s, uid).generation == 2
    assert op_state(s, events) == "succeeded"
    changed = put(s, uid, version_spec(w, vars={"A": "b"}))
    assert code(changed) == "invalid_spec" and paths(changed) == {"/spec/vars"}
    other = put(s, uid, version_spec(w, modules=[{"name": "worker.js", "content": "//"}]))
    assert code(other) == "invalid_spec" and paths(other) == {"/spec/modules"}


def test_version_busy_while_verifying() -> None:
    s = new_state()
    w = worker(s)
    uid, _ = version(s, w)
    assert code(delete(s, uid)) == "resource_busy"


def test_version_delete_refused_while_weighted() -> None:
    s = new_state()
    w = worker(s)
    v = verified(s, w)
    assert reply(deploy(s, w, (v, 100))).accepted
    assert code(delete(s, v)) == "dependency_conflict"
    assert reply(delete(s, "d")).accepted
    assert reply(delete(s, v)).accepted and res(s, v) is None


# ---- ModuleWorker observed -------------------------------------------------------------------


def test_module_worker_observed_follows_versions_and_deployment() -> None:
    s = new_state()
    w = worker(s)
    assert observed(s, w) == {"activeDeployment": None, "versions": 0}
    v1 = verified(s, w)
    assert observed(s, w) == {"activeDeployment": None, "versions": 1}
    _, op_id = version(s, w, "v2")
    assert observed(s, w)["versions"] == 2
    report(s, op_id, ok=False, load_error="boom")
    assert observed(s, w)["versions"] == 1
    deploy(s, w, (v1, 100))
    d = res(s, "d").uid
    assert observed(s, w) == {"activeDeployment": {"resourceUid": d}, "versions": 1}
    delete(s, d)
    assert observed(s, w) == {"activeDeployment": None, "versions": 1}
    delete(s, v1)
    assert observed(s, w) == {"activeDeployment": None, "versions": 0}


def test_worker_observation_precedes_the_operation_end() -> None:
    # Read your writes: the worker's observed is in the log before the Operation is seen to end.
    s = new_state()
    w = worker(s)
    v = verified(s, w)
    events = deploy(s, w, (v, 100))
    kinds = [(type(e).__name__, getattr(e, "uid", getattr(e, "state", None))) for e in events]
    assert kinds.index(("ResourceObserved", w)) < kinds.index(("OperationStateChanged", "succeeded"))


# ---- WorkerDeployment: shape -----------------------------------------------------------------


def validate_deployment(spec: Any) -> set[str]:
    return {e.path for e in FORMS[WORKER_DEPLOYMENT].validate_spec(spec)}


def test_deployment_shape() -> None:
    assert validate_deployment(deployment_spec("res_w", ("res_a", 40), ("res_b", 60))) == set()
    assert validate_deployment({"x": 1}) == {"/spec/x", "/spec/worker", "/spec/versions"}
    assert validate_deployment(deployment_spec("res_w")) == {"/spec/versions"}
    eleven = [(f"res_{i}", 10) for i in range(11)]
    assert validate_deployment(deployment_spec("res_w", *eleven)) == {"/spec/versions"}
    ten = [(f"res_{i}", 10) for i in range(10)]
    assert validate_deployment(deployment_spec("res_w", *ten)) == set()
    assert validate_deployment(deployment_spec("res_w", ("res_a", 50), ("res_b", 49))) == {"/spec/versions"}
    assert validate_deployment(deployment_spec("res_w", ("res_a", 0), ("res_b", 100))) == {
        "/spec/versions/0/percentage"
    }
    assert validate_deployment(deployment_spec("res_w", ("res_a", 101))) == {"/spec/versions/0/percentage"}
    assert validate_deployment(deployment_spec("res_w", ("res_a", True))) == {"/spec/versions/0/percentage"}
    assert validate_deployment(deployment_spec("res_w", ("res_a", 50.0), ("res_b", 50))) == {
        "/spec/versions/0/percentage"
    }
    assert validate_deployment(deployment_spec("res_w", ("res_a", 50), ("res_a", 50))) == {"/spec/versions/1/version"}
    spec = deployment_spec("res_w", ("res_a", 100))
    spec["versions"][0]["weight"] = 1
    assert validate_deployment(spec) == {"/spec/versions/0/weight"}
    assert validate_deployment({"worker": "w", "versions": [{"version": {}, "percentage": 100}]}) == {
        "/spec/worker",
        "/spec/versions/0/version/resourceUid",
    }


def test_deployment_sum_not_100_is_invalid_spec() -> None:
    s = new_state()
    w = worker(s)
    v = verified(s, w)
    assert code(deploy(s, w, (v, 90))) == "invalid_spec"


# ---- WorkerDeployment: references -------------------------------------------------------------


def test_deployment_references() -> None:
    s = new_state()
    w = worker(s)
    other = worker(s, "other")
    v = verified(s, w)
    foreign = verified(s, other, "fv")
    assert code(deploy(s, "res_nope", (v, 100))) == "dependency_conflict"
    assert code(deploy(s, v, (v, 100))) == "dependency_conflict"  # a Version is no worker
    assert code(deploy(s, w, ("res_nope", 100))) == "dependency_conflict"
    assert code(deploy(s, w, (w, 100))) == "dependency_conflict"  # a worker is no Version
    p = problem(deploy(s, w, (v, 50), (foreign, 50)))  # a Version of another worker
    assert p["code"] == "dependency_conflict" and foreign in p["detail"]
    assert reply(deploy(s, w, (v, 100))).accepted
    p = problem(deploy(s, w, (v, 100), name="d2"))  # at most one Deployment per worker
    assert p["code"] == "dependency_conflict" and "already has" in p["detail"]
    assert not res(s, "d2")


def test_deployment_worker_is_immutable() -> None:
    s = new_state()
    w = worker(s)
    w2 = worker(s, "w2")
    v = verified(s, w)
    v2 = verified(s, w2, "v2")
    deploy(s, w, (v, 100))
    events = put(s, "d", deployment_spec(w2, (v2, 100)))
    assert code(events) == "invalid_spec" and paths(events) == {"/spec/worker"}


def test_deployment_refuses_a_version_known_to_fail() -> None:
    # WF-5 / QC-16: established incompatibility is refused before side effects.
    s = new_state()
    w = worker(s, handlers=[])
    no_queue = verified(s, w, "nq", handlers=())
    run(
        s,
        cmd("resource.update", {"ref": w, "spec": {"runtime": "javascript", "handlers": ["queue"]}}),
    )
    before = len(s.space("demo").resources)
    p = problem(deploy(s, w, (no_queue, 100)))
    assert p["code"] == "dependency_conflict" and "queue" in p["detail"]
    assert len(s.space("demo").resources) == before

    # A Version whose observed says it does not load.
    broken = verified(s, w, "broken")
    run(
        s,
        cmd("resource.observe", {"uid": broken, "observed": {"verified": True, "loadError": "x"}}),
    )
    assert code(deploy(s, w, (broken, 100))) == "dependency_conflict"


def test_deployment_refuses_a_version_missing_a_workflow_class() -> None:
    # WF-5, WF-28: every class an existing DurableWorkflow on the worker names must be exported.
    s = new_state()
    w = worker(s)
    with_class = verified(s, w, "a", classes=("ReportWorkflow",))
    without = verified(s, w, "b", classes=())
    sp = s.space("demo")
    sp.resources["res_wf"] = replace(
        sp.resources[with_class],
        uid="res_wf",
        name="wf",
        form=DURABLE_WORKFLOW,
        spec={"worker": {"resourceUid": w}, "className": "ReportWorkflow"},
        state="active",
        observed={},
    )
    p = problem(deploy(s, w, (with_class, 50), (without, 50)))
    assert p["code"] == "dependency_conflict" and "ReportWorkflow" in p["detail"]
    assert reply(deploy(s, w, (with_class, 100))).accepted


# ---- WorkerDeployment: awaiting verification ----------------------------------------------------


def test_weighting_a_verifying_version_awaits_then_succeeds() -> None:
    s = new_state()
    w = worker(s)
    pending, op_id = version(s, w)
    events = deploy(s, w, (pending, 100))
    assert reply(events).status == 202
    assert op_state(s, events) == "running" and res(s, "d").state == "creating"
    assert observed(s, w)["activeDeployment"] is None  # not active until it succeeds
    ended = report(s, op_id)
    assert op_state(s, events) == "succeeded" and res(s, "d").state == "active"
    assert any(
        isinstance(e, r.OperationStateChanged) and e.state == "succeeded" and e.id == reply(events).operationId
        for e in ended
    )  # in the same decision
    assert observed(s, w)["activeDeployment"] == {"resourceUid": res(s, "d").uid}


def test_awaiting_deployment_waits_for_every_weighted_version() -> None:
    s = new_state()
    w = worker(s)
    a, op_a = version(s, w, "a")
    b, op_b = version(s, w, "b")
    events = deploy(s, w, (a, 30), (b, 70))
    report(s, op_a)
    assert op_state(s, events) == "running"
    report(s, op_b)
    assert op_state(s, events) == "succeeded"


def test_awaiting_deployment_create_fails_when_its_version_fails() -> None:
    s = new_state()
    w = worker(s)
    good = verified(s, w, "good")
    bad, op_id = version(s, w, "bad")
    events = deploy(s, w, (good, 50), (bad, 50))
    report(s, op_id, ok=False, load_error="SyntaxError")
    op = s.space("demo").operations[str(reply(events).operationId)]
    assert op.state == "failed"
    assert res(s, "d") is None  # a failed create leaves no Resource
    ended = next(e for e in s_events(s, events) if e.state == "failed")
    assert json.loads(ended.error)["code"] == "dependency_conflict"
    assert observed(s, w)["activeDeployment"] is None


def s_events(s: ControlState, events: list[Any]) -> list[r.OperationStateChanged]:
    """The OperationStateChanged records of the Operation `events` started, as the log has them."""
    op_id = reply(events).operationId
    return [e for e in LOG if isinstance(e, r.OperationStateChanged) and e.id == op_id]


def test_failed_update_keeps_the_previous_allocation() -> None:
    s = new_state()
    w = worker(s)
    v1 = verified(s, w, "v1")
    deploy(s, w, (v1, 100))
    d = res(s, "d").uid
    v2, op_id = version(s, w, "v2")
    new = deployment_spec(w, (v1, 50), (v2, 50))
    events = put(s, d, new)
    assert reply(events).status == 202 and op_state(s, events) == "running"
    assert res(s, d).state == "updating" and res(s, d).generation == 2
    # While the update waits, the previous allocation stays in force; WF-4 sees both.
    assert active_allocation(s.space("demo"), w) == [(v1, 100)]
    assert allocations_to_check(s.space("demo"), w) == [[(v1, 100)], [(v1, 50), (v2, 50)]]
    assert code(put(s, d, deployment_spec(w, (v1, 100)))) == "resource_busy"

    report(s, op_id, ok=False, load_error="boom")
    assert op_state(s, events) == "failed"
    assert json.loads(s_events(s, events)[-1].error)["code"] == "dependency_conflict"
    after = res(s, d)
    assert after.state == "active" and dict(after.spec) == deployment_spec(w, (v1, 100))
    assert after.generation == 2  # generations count accepted PUTs; the spec went back
    assert active_allocation(s.space("demo"), w) == [(v1, 100)]
    assert observed(s, w) == {"activeDeployment": {"resourceUid": d}, "versions": 1}


def test_successful_awaited_update_applies_the_new_allocation() -> None:
    s = new_state()
    w = worker(s)
    v1 = verified(s, w, "v1")
    deploy(s, w, (v1, 100))
    v2, op_id = version(s, w, "v2")
    events = put(s, "d", deployment_spec(w, (v2, 100)))
    report(s, op_id)
    assert op_state(s, events) == "succeeded"
    assert active_allocation(s.space("demo"), w) == [(v2, 100)]
    assert code(delete(s, v2)) == "dependency_conflict"
    assert reply(delete(s, v1)).accepted  # no longer weighted


def test_failed_update_of_another_form_reverts_too() -> None:
    # The revert is generic: a failed update has effect "none", so its spec goes back.
    s = new_state()
    run(s, cmd("resource.create", {"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}}))
    form = FORMS[QUEUE]
    form.completion = lambda kind, registry, resource: "await"  # type: ignore[method-assign]
    try:
        events = put(s, "q", {"retentionSeconds": 120})
    finally:
        del form.completion
    op_id = str(reply(events).operationId)
    run(
        s,
        cmd(
            "operation.report",
            {"operationId": op_id, "outcome": "failed", "error": {"code": "invalid_spec"}},
        ),
    )
    assert dict(res(s, "q").spec) == {"retentionSeconds": 60} and res(s, "q").generation == 2


def test_report_before_the_deployment_apply_is_settled_at_apply() -> None:
    # The verifier's report can land between a Deployment's decision and its apply follow-up.
    s = new_state()
    w = worker(s)
    pending, op_id = version(s, w)
    d = decide(
        s,
        cmd(
            "resource.create",
            {"name": "d", "form": WORKER_DEPLOYMENT, "spec": deployment_spec(w, (pending, 100))},
        ),
        NOW,
    )
    for e in d.events:
        evolve(s, e)
    report(s, op_id, ok=False, load_error="boom")
    dep_op = str(reply(d.events).operationId)
    assert s.space("demo").operations[dep_op].state == "pending"
    ended = run(s, d.followups[0])
    assert [e.state for e in ended if isinstance(e, r.OperationStateChanged)] == [
        "running",
        "failed",
    ]
    assert res(s, "d") is None


def test_report_before_apply_then_success() -> None:
    s = new_state()
    w = worker(s)
    pending, op_id = version(s, w)
    d = decide(
        s,
        cmd(
            "resource.create",
            {"name": "d", "form": WORKER_DEPLOYMENT, "spec": deployment_spec(w, (pending, 100))},
        ),
        NOW,
    )
    for e in d.events:
        evolve(s, e)
    report(s, op_id)
    ended = run(s, d.followups[0])
    assert [e.state for e in ended if isinstance(e, r.OperationStateChanged)] == [
        "running",
        "succeeded",
    ]
    assert res(s, "d").state == "active"


def test_rejections_change_nothing() -> None:
    # Validation before side effects: only the rejected command's own decision record.
    s = new_state()
    w = worker(s)
    v = verified(s, w)
    for events in (
        deploy(s, w, (v, 99)),
        deploy(s, w, ("res_x", 100)),
        create(s, "v9", WORKER_VERSION, version_spec("res_nope")),
    ):
        assert [type(e) for e in events] == [r.CommandDecided]


# ---- the verifier's judgement (real runtimes, no broker) -----------------------------------------


def _created(uid: str, worker_uid: str, modules: dict[str, str], main: str) -> r.ResourceCreated:
    spec = {
        "worker": {"resourceUid": worker_uid},
        "mainModule": main,
        "modules": [{"name": n, "content": c} for n, c in modules.items()],
    }
    return r.ResourceCreated(uid, "demo", "v", WORKER_VERSION, json.dumps(spec), 1, f"op_{uid}", NOW)


async def test_verifier_reports_exports_and_failures() -> None:
    from sumi.core.commands import OperationReport, decode
    from sumi.core.config import Settings
    from sumi.verifier import Verifier

    verifier = Verifier(Settings("127.0.0.1:1", "postgresql://x"))
    try:
        verifier.fold(
            r.ResourceCreated(
                "res_w",
                "demo",
                "w",
                MODULE_WORKER,
                json.dumps({"runtime": "javascript", "handlers": ["queue"]}),
                1,
                "op_w",
                NOW,
            )
        )
        good = await verifier.verify(
            _created(
                "res_a",
                "res_w",
                {"worker.js": GOOD_JS + "export class Flow { run() {} }\n"},
                "worker.js",
            )
        )
        assert good == OperationReport(
            operation_id="op_res_a",
            outcome="succeeded",
            observed={"verified": True, "handlers": ["queue"], "workflowClasses": ["Flow"]},
        )
        broken = await verifier.verify(_created("res_b", "res_w", {"worker.js": "export default {"}, "worker.js"))
        assert broken.outcome == "failed" and broken.error and broken.error["code"] == "invalid_spec"
        assert broken.observed and broken.observed["verified"] is True
        assert "SyntaxError" in broken.observed["loadError"]
        lacking = await verifier.verify(_created("res_c", "res_w", {"worker.js": "export default {};"}, "worker.js"))
        assert lacking.outcome == "failed" and lacking.error and "queue" in lacking.error["detail"]  # QC-16
        assert lacking.observed == {"verified": True, "handlers": [], "workflowClasses": []}
        # The worker's later update (handlers dropped) is folded too.
        verifier.fold(
            r.ResourceUpdated(
                "res_w",
                "demo",
                json.dumps({"runtime": "javascript", "handlers": []}),
                2,
                "op_u",
                NOW,
            )
        )
        again = await verifier.verify(_created("res_d", "res_w", {"worker.js": "export default {};"}, "worker.js"))
        assert again.outcome == "succeeded"
        verifier.fold(r.ResourceDeleted("res_w", "demo", "op_d", NOW))
        orphan = await verifier.verify(_created("res_e", "res_w", {"worker.js": GOOD_JS}, "worker.js"))
        assert orphan.outcome == "failed"
        cmd_ = verifier.command("demo", good, NOW)
        assert cmd_.kind == "operation.report" and cmd_.admin and cmd_.principal == "sumi-verifier"
        assert decode("operation.report", cmd_.payload) == good
        assert json.loads(cmd_.payload) == {
            "operationId": "op_res_a",
            "outcome": "succeeded",
            "observed": {"verified": True, "handlers": ["queue"], "workflowClasses": ["Flow"]},
        }
    finally:
        await verifier.close()
