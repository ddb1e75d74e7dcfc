"""The public fold of the control log (sumi.control.rules.state), as every service reads it."""

from typing import Any

from sumi.control.rules.forms.names import DURABLE_WORKFLOW, MODULE_WORKER, QUEUE, WORKER_DEPLOYMENT, WORKER_VERSION
from sumi.control.rules.state import ControlState, evolve, serving_allocation, version, workflows
from sumi.core import records as r
from tests.decisions_kit import command, run


def _space(s: ControlState, name: str = "demo") -> None:
    run(s, command("space.create", {"name": name}, space=name))


def _create(s: ControlState, name: str, form: str, spec: dict[str, Any], space: str = "demo") -> str:
    events = run(s, command("resource.create", {"name": name, "form": form, "spec": spec}, space=space))
    return next(e.uid for e in events if isinstance(e, r.ResourceCreated))


def _verified(s: ControlState, uid: str, **observed: Any) -> None:
    evolve(s, r.ResourceObserved(uid, s.located[uid], '{"verified":true,"handlers":["queue"]}', 0))
    space = s.space_of(uid)
    assert space is not None
    op = space.unfinished_operation(uid)
    assert op is not None
    run(
        s,
        command(
            "operation.report",
            {"operationId": op.id, "outcome": "succeeded", "observed": {"verified": True, **observed}},
            space=space.name,
        ),
    )


def test_one_fold_answers_across_spaces() -> None:
    s = ControlState()
    _space(s, "a")
    _space(s, "b")
    qa = _create(s, "q", QUEUE, {"retentionSeconds": 60}, space="a")
    qb = _create(s, "q", QUEUE, {"retentionSeconds": 60}, space="b")
    assert s.located == {qa: "a", qb: "b"}
    res = s.resource(qb)
    assert res is not None and res.state == "active"
    assert sorted(sp.name for sp, _ in s.resources(QUEUE)) == ["a", "b"]
    run(s, command("resource.delete", {"ref": "q"}, space="a"))
    assert s.resource(qa) is None and s.deleted == {qa: QUEUE}


def test_a_deployment_update_takes_effect_when_it_succeeds() -> None:
    # forms.md WorkerDeployment 0.4.0 (WF-6): the update waits for v2 to verify; until then v1 serves.
    s = ControlState()
    _space(s)
    worker = _create(s, "w", MODULE_WORKER, {"runtime": "javascript", "handlers": ["queue"]})
    spec = {"worker": {"resourceUid": worker}, "mainModule": "a.js", "modules": [{"name": "a.js", "content": "x"}]}
    v1 = _create(s, "v1", WORKER_VERSION, spec)
    _verified(s, v1, handlers=["queue"], workflowClasses=["Flow"])
    v2 = _create(s, "v2", WORKER_VERSION, spec)

    def deployment(v: str) -> dict[str, Any]:
        return {"worker": {"resourceUid": worker}, "versions": [{"version": {"resourceUid": v}, "percentage": 100}]}

    _create(s, "d", WORKER_DEPLOYMENT, deployment(v1))
    assert serving_allocation(s, worker) == [(v1, 100)]
    run(s, command("resource.update", {"ref": "d", "spec": deployment(v2)}))
    assert serving_allocation(s, worker) == [(v1, 100)]  # v2 still verifies: v1 is in force
    _verified(s, v2, handlers=["queue"])
    assert serving_allocation(s, worker) == [(v2, 100)]
    view = version(s, v1)
    assert view is not None and view.verified and view.runtime == "javascript"
    assert view.handlers == ("queue",) and view.workflow_classes == ("Flow",) and view.modules == (("a.js", "x"),)


def test_workflows_of_a_space() -> None:
    s = ControlState()
    _space(s)
    uid = "res_wf"
    evolve(s, r.ResourceCreated(uid, "demo", "flow", DURABLE_WORKFLOW, "{}", 1, "op_wf", 0))
    evolve(s, r.ResourceStateChanged(uid, "demo", "active", 0))
    assert [(w.uid, w.name, w.state) for w in workflows(s, "demo")] == [(uid, "flow", "active")]
    assert workflows(s, "other") == []
