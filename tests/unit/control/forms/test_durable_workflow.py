"""DurableWorkflow 0.3.0 in the control processor's pure decisions (WF-1..17, WF-9)."""

import json
import re
import string
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sumi.control import ControlState
from sumi.control.rules.forms import FORMS
from sumi.control.rules.forms.durable_workflow import STATUSES
from sumi.control.rules.forms.names import DURABLE_WORKFLOW, QUEUE, WORKER_VERSION
from sumi.core import records as r
from sumi.gateway.openapi import document
from tests.decisions_kit import (
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

FORM = FORMS[DURABLE_WORKFLOW]
ZERO = dict.fromkeys(STATUSES, 0)


def wf_spec(worker_uid: str, class_name: str = "Flow") -> dict[str, Any]:
    return {"worker": {"resourceUid": worker_uid}, "className": class_name}


def workflow(s: ControlState, worker_uid: str, name: str = "wf", class_name: str = "Flow") -> list[Any]:
    return create(s, name, DURABLE_WORKFLOW, wf_spec(worker_uid, class_name))


def spec_paths(spec: Any) -> set[str]:
    return {e.path for e in FORM.validate_spec(spec)}


def nothing_created(s: ControlState, name: str = "wf") -> None:
    assert res(s, name) is None


# ---- WF-1: spec shape ---------------------------------------------------------------------------


def test_good_spec() -> None:  # WF-1
    assert spec_paths(wf_spec("res_w")) == set()
    assert spec_paths(wf_spec("res_w", "$_a9$")) == set()
    assert spec_paths(wf_spec("res_w", "A" * 64)) == set()


@pytest.mark.parametrize(
    "spec, path",
    [
        ({"className": "Flow"}, "/spec/worker"),  # no defaults
        ({"worker": {"resourceUid": "res_w"}}, "/spec/className"),
        ({**wf_spec("res_w"), "extra": 1}, "/spec/extra"),
        ({**wf_spec("res_w"), "privateInputs": {}}, "/spec/privateInputs"),
        ({**wf_spec("res_w"), "className": None}, "/spec/className"),
        ({**wf_spec("res_w"), "worker": None}, "/spec/worker"),
        ({**wf_spec("res_w"), "worker": {"resourceUid": "res_w", "name": "w"}}, "/spec/worker/name"),
        ({**wf_spec("res_w"), "worker": {"resourceUid": ""}}, "/spec/worker/resourceUid"),
        ({**wf_spec("res_w"), "worker": {}}, "/spec/worker/resourceUid"),
        ({**wf_spec("res_w"), "worker": "res_w"}, "/spec/worker"),
        (wf_spec("res_w", ""), "/spec/className"),
        (wf_spec("res_w", "9Flow"), "/spec/className"),
        (wf_spec("res_w", "Flow\n"), "/spec/className"),
        (wf_spec("res_w", "Fl-ow"), "/spec/className"),
        (wf_spec("res_w", "Flöw"), "/spec/className"),
        (wf_spec("res_w", "A" * 65), "/spec/className"),
        (None, "/spec"),
        ([], "/spec"),
    ],
)
def test_bad_specs_name_the_path(spec: Any, path: str) -> None:  # WF-1
    assert path in spec_paths(spec)


# The rule written out once more, independently of the validator's regular expression.
FIRST = set(string.ascii_letters + "_$")
REST = FIRST | set(string.digits)


def is_class_name(name: str) -> bool:
    return 1 <= len(name) <= 64 and name[0] in FIRST and all(c in REST for c in name[1:])


@given(st.text(alphabet=st.sampled_from(sorted(REST) + ["-", " ", "\n", "é", "\u0000", "😀"]), max_size=70))
def test_class_name_property(name: str) -> None:  # WF-1
    assert ("/spec/className" not in spec_paths(wf_spec("res_w", name))) == is_class_name(name)


@given(
    st.dictionaries(
        st.text(max_size=8).filter(lambda k: k not in ("worker", "className")),
        st.none() | st.integers() | st.text(max_size=4),
        min_size=1,
        max_size=4,
    )
)
def test_unknown_keys_are_each_rejected_never_ignored(extra: dict[str, Any]) -> None:  # WF-1
    assert spec_paths({**wf_spec("res_w"), **extra}) == {f"/spec/{k}" for k in extra}


@given(st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.lists(st.integers()))
def test_a_non_object_spec_is_rejected(spec: Any) -> None:  # WF-1
    assert spec_paths(spec) == {"/spec"}


# ---- WF-2: references ---------------------------------------------------------------------------


def test_references_are_checked_before_side_effects() -> None:  # WF-2, WF-15
    s = new_state()
    w = worker(s)
    assert reply(create(s, "q", QUEUE, {"retentionSeconds": 60})).accepted
    queue_uid = res(s, "q").uid
    assert code(workflow(s, "res_nope")) == "dependency_conflict"  # must exist at creation
    assert code(workflow(s, queue_uid)) == "dependency_conflict"  # wrong Form
    assert code(workflow(s, "w")) == "dependency_conflict"  # a name is no UID reference
    nothing_created(s)
    other = ControlState()
    run(other, cmd("space.create", {"name": "demo"}))
    assert "not found" in problem(create(other, "wf", DURABLE_WORKFLOW, wf_spec(w)))["detail"]  # another Space
    assert reply(workflow(s, w)).accepted


def test_a_worker_being_deleted_is_no_reference() -> None:  # WF-2
    s = new_state()
    w = worker(s)
    sp = s.space("demo")
    sp.resources[w] = replace(sp.resources[w], state="deleting")
    assert code(workflow(s, w)) == "dependency_conflict"


# ---- WF-3..8: the Versions a new instance could run on --------------------------------------------


def test_no_deployment_allows_create_not_ready() -> None:  # WF-3, WF-7, WF-9, WF-10
    s = new_state()
    w = worker(s)
    events = workflow(s, w)
    assert reply(events).status == 202 and op_state(s, events) == "succeeded"
    assert res(s, "wf").state == "active"
    seen = observed(s, "wf")
    assert seen["ready"] is False and seen["instanceCounts"] == ZERO
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", seen["observedAt"])


def test_ready_when_every_weighted_version_exports_the_class() -> None:  # WF-3, WF-9
    s = new_state()
    w = worker(s)
    v = verified(s, w, classes=("Flow",))
    deploy(s, w, (v, 100))
    events = workflow(s, w)
    assert reply(events).accepted and observed(s, "wf")["ready"] is True
    # The observation is recorded before the create Operation is seen to succeed (read your writes).
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("ResourceObserved") < max(i for i, k in enumerate(kinds) if k == "OperationStateChanged")


def test_ready_follows_the_deployment() -> None:  # WF-3, WF-9
    s = new_state()
    w = worker(s)
    workflow(s, w)
    v = verified(s, w, classes=("Flow", "Other"))
    assert observed(s, "wf")["ready"] is False
    deploy(s, w, (v, 100))
    assert observed(s, "wf")["ready"] is True
    events = delete(s, "d")
    assert reply(events).accepted and res(s, "d") is None
    assert observed(s, "wf")["ready"] is False  # no Deployment: not Ready


def test_missing_class_is_dependency_conflict_and_changes_nothing() -> None:  # WF-5, WF-28
    s = new_state()
    w = worker(s)
    v = verified(s, w, classes=("Other",))
    deploy(s, w, (v, 100))
    before = dict(s.space("demo").resources)
    p = problem(workflow(s, w))
    assert p["code"] == "dependency_conflict" and "Flow" in p["detail"]
    assert s.space("demo").resources == before  # no Workflow, the Deployment as it was


def test_a_version_that_does_not_load_is_dependency_conflict() -> None:  # WF-5
    s = new_state()
    w = worker(s)
    v = verified(s, w, classes=("Flow",))
    deploy(s, w, (v, 100))
    run(s, cmd("resource.observe", {"uid": v, "observed": {"verified": True, "loadError": "SyntaxError"}}))
    assert code(workflow(s, w)) == "dependency_conflict"


def test_every_weighted_version_counts() -> None:  # WF-4, WF-5
    s = new_state()
    w = worker(s)
    good = verified(s, w, "good", classes=("Flow",))
    bad = verified(s, w, "bad", classes=())
    deploy(s, w, (good, 90), (bad, 10))
    p = problem(workflow(s, w))
    assert p["code"] == "dependency_conflict" and bad in p["detail"]


def test_pending_verification_in_an_unfinished_create_is_resource_busy() -> None:  # WF-4, WF-6, WF-17
    s = new_state()
    w = worker(s)
    pending, op_id = version(s, w)
    d = deploy(s, w, (pending, 100))
    assert op_state(s, d) == "running"
    p = problem(workflow(s, w))
    assert p["code"] == "resource_busy" and pending in p["detail"]  # never taken as incompatible
    nothing_created(s)
    report(s, op_id, classes=("Flow",))
    assert op_state(s, d) == "succeeded"
    assert reply(workflow(s, w)).accepted and observed(s, "wf")["ready"] is True


def test_pending_version_that_then_fails_frees_the_create() -> None:  # WF-6, WF-7
    s = new_state()
    w = worker(s)
    pending, op_id = version(s, w)
    d = deploy(s, w, (pending, 100))
    assert code(workflow(s, w)) == "resource_busy"
    report(s, op_id, ok=False)
    assert op_state(s, d) == "failed" and res(s, "d") is None
    assert reply(workflow(s, w)).accepted and observed(s, "wf")["ready"] is False


def test_unfinished_update_allocations_are_examined_too() -> None:  # WF-4, WF-5, WF-6
    s = new_state()
    w = worker(s)
    good = verified(s, w, "good", classes=("Flow",))
    bad = verified(s, w, "bad", classes=())
    deploy(s, w, (good, 100))
    pending, op_id = version(s, w, "pending")
    # An accepted update that waits for `pending`: it will weight `bad` too once applied.
    upd = put(s, "d", deployment_spec(w, (pending, 50), (bad, 50)))
    assert op_state(s, upd) == "running"
    p = problem(workflow(s, w))
    assert p["code"] == "dependency_conflict" and bad in p["detail"]  # established beats pending
    report(s, op_id, ok=False)  # the update fails: the previous allocation stays in force
    assert op_state(s, upd) == "failed"
    assert reply(workflow(s, w)).accepted and observed(s, "wf")["ready"] is True


def test_unfinished_update_with_a_verifying_version_is_busy() -> None:  # WF-4, WF-6
    s = new_state()
    w = worker(s)
    good = verified(s, w, "good", classes=("Flow",))
    deploy(s, w, (good, 100))
    pending, op_id = version(s, w, "pending")
    upd = put(s, "d", deployment_spec(w, (pending, 100)))
    assert code(workflow(s, w)) == "resource_busy"
    report(s, op_id, classes=("Flow",))
    assert op_state(s, upd) == "succeeded"
    assert reply(workflow(s, w)).accepted


def test_an_accepted_create_is_never_replaced_by_a_pre_rejection() -> None:  # WF-8, WF-16
    s = new_state()
    w = worker(s)
    payload = json.dumps({"name": "wf", "form": DURABLE_WORKFLOW, "spec": wf_spec(w)})
    first = run(s, r.CommandSubmitted("c-1", "resource.create", "demo", "alice", False, payload, 0, "k1", "f1"))
    op = reply(first).operationId
    assert op and op_state(s, first) == "succeeded"
    # The retry with the same key meets its own Resource: the same Operation, not name_conflict.
    again = run(s, r.CommandSubmitted("c-2", "resource.create", "demo", "alice", False, payload, 0, "k1", "f1"))
    assert reply(again).accepted and reply(again).operationId == op
    assert len([x for x in s.space("demo").resources.values() if x.form == DURABLE_WORKFLOW]) == 1


# ---- WF-11: PUT ---------------------------------------------------------------------------------


def test_put_allows_only_the_same_worker_and_class() -> None:  # WF-11
    s = new_state()
    w = worker(s)
    w2 = worker(s, "w2")
    workflow(s, w)
    events = put(s, "wf", wf_spec(w, "Other"))
    assert code(events) == "invalid_spec" and paths(events) == {"/spec/className"}
    events = put(s, "wf", wf_spec(w2))
    assert code(events) == "invalid_spec" and paths(events) == {"/spec/worker"}
    events = put(s, "wf", {**wf_spec(w), "x": 1})
    assert code(events) == "invalid_spec" and paths(events) == {"/spec/x"}
    assert res(s, "wf").generation == 1
    events = put(s, "wf", wf_spec(w))  # the same spec: a new Operation and generation
    assert reply(events).accepted and op_state(s, events) == "succeeded"
    assert res(s, "wf").generation == 2 and res(s, "wf").state == "active"


# ---- WF-12..17: DELETE --------------------------------------------------------------------------


def test_delete_is_blocked_by_any_version_binding() -> None:  # WF-12, WF-17
    s = new_state()
    w = worker(s)
    workflow(s, w)
    wf = res(s, "wf").uid
    bindings = [{"name": "FLOW", "resource": {"resourceUid": wf}}]
    bound, op_id = version(s, w, "bound", workflowBindings=bindings)  # verifying, not weighted
    p = problem(delete(s, "wf"))
    assert p["code"] == "dependency_conflict" and bound in p["detail"]
    report(s, op_id, classes=("Flow",))  # verified, still not weighted
    assert code(delete(s, "wf")) == "dependency_conflict"
    assert res(s, "wf").state == "active"
    assert reply(delete(s, "bound")).accepted and res(s, "bound") is None
    assert reply(delete(s, "wf")).accepted


def test_delete_is_awaited_until_the_engine_reports() -> None:  # WF-13, WF-14, WF-15, WF-16
    s = new_state()
    w = worker(s)
    v = verified(s, w, classes=("Flow",))
    deploy(s, w, (v, 100))
    workflow(s, w)
    assert observed(s, "wf")["ready"] is True
    events = delete(s, "wf")
    op_id = str(reply(events).operationId)
    assert op_state(s, events) == "running" and res(s, "wf").state == "deleting"
    assert observed(s, "wf")["ready"] is False  # intake closed
    assert code(delete(s, "wf")) == "resource_busy"  # WF-17: a short-lived concurrent change
    problem_json = {"code": "backend_unavailable", "status": 503, "detail": "stop not confirmed"}
    run(
        s,
        cmd(
            "operation.report",
            {"operationId": op_id, "outcome": "reconciling", "effect": "unknown", "error": problem_json},
        ),
    )
    assert op_state(s, events) == "reconciling" and res(s, "wf").state == "deleting"
    run(s, cmd("operation.report", {"operationId": op_id, "outcome": "succeeded", "effect": "complete"}))
    assert op_state(s, events) == "succeeded" and res(s, "wf") is None
    assert res(s, "w") is not None and res(s, "v1") is not None and res(s, "d") is not None  # no cascade
    again = workflow(s, w)  # the same name again: a new UID
    assert reply(again).accepted and res(s, "wf").uid != op_id


# ---- Version and Deployment rules about Workflows -------------------------------------------------


def test_version_may_bind_a_workflow_of_the_space() -> None:  # WF-12, WF-18
    s = new_state()
    w = worker(s)
    workflow(s, w)
    bindings = [{"name": "FLOW", "resource": {"resourceUid": res(s, "wf").uid}}]
    assert reply(create(s, "v", WORKER_VERSION, version_spec(w, workflowBindings=bindings))).accepted


def test_deployment_must_keep_an_existing_workflow_class() -> None:  # WF-5, WF-28
    s = new_state()
    w = worker(s)
    workflow(s, w)
    without = verified(s, w, "without", classes=())
    p = problem(deploy(s, w, (without, 100)))
    assert p["code"] == "dependency_conflict" and "Flow" in p["detail"] and res(s, "wf").uid in p["detail"]


# ---- WF-9: reported counts ----------------------------------------------------------------------


def test_reported_counts_keep_the_control_planes_ready() -> None:  # WF-9
    s = new_state()
    w = worker(s)
    workflow(s, w)
    uid = res(s, "wf").uid
    counts = {**ZERO, "running": 2, "complete": 5}
    run(s, cmd("resource.observe", {"uid": uid, "observed": {"instanceCounts": counts, "ready": True}}))
    seen = observed(s, "wf")
    assert seen["instanceCounts"] == counts and seen["ready"] is False  # no Deployment: not Ready
    v = verified(s, w, classes=("Flow",))
    deploy(s, w, (v, 100))
    assert observed(s, "wf") == {**observed(s, "wf"), "ready": True, "instanceCounts": counts}


def test_the_form_gains_nothing_implicitly() -> None:  # WF-48, WF-21, WF-22
    assert FORM.url == "https://edge.forms.takoform.com/forms/DurableWorkflow/0.3.0/"
    assert STATUSES == ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")
    schemas = document()["components"]["schemas"]
    assert schemas["Instance"]["properties"]["status"]["enum"] == list(STATUSES)
    assert set(schemas["Instance"]["properties"]["error"]["properties"]["reason"]["enum"]) == {
        "run_threw",
        "step_failed",
        "step_limit_exceeded",
        "lifetime_exceeded",
        "step_definition_mismatch",
    }
    assert spec_paths({**wf_spec("res_w"), "retention": 30}) == {"/spec/retention"}  # no new inputs
