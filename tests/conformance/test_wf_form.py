"""DurableWorkflow 0.3.0 as a Host API v2 Resource over real HTTP: input, references, the
Version/Deployment checks before acceptance, observed, PUT and DELETE (WF-1..17)."""

import asyncio
import re
import time
import uuid
from typing import Any

import pytest

from tests.conformance.kit import Api
from tests.httpkit import DEPLOYMENT, WORKER, WORKFLOW, assert_problem, auth

pytestmark = pytest.mark.integration

FLOW_JS = """
export default {};
export class Flow { constructor(env) { this.env = env; } async run(event, step) { return {ok: true}; } }
export class Other { run() {} }
"""
NO_FLOW_JS = "export default {};\nexport class Other { run() {} }\n"
# Verification loads the main module once: a slow top level keeps a Version "verifying" a while.
SLOW_FLOW_JS = "const t0 = Date.now(); while (Date.now() - t0 < 4000) {}\n" + FLOW_JS
STATUSES = ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")


def spec(worker: str, class_name: str = "Flow") -> dict[str, Any]:
    return {"worker": {"resourceUid": worker}, "className": class_name}


async def rejected(api: Api, body_spec: Any, status: int, code: str, **extra: Any) -> dict[str, Any]:
    name = f"wf-{uuid.uuid4().hex[:8]}"
    body = assert_problem(await api.post(name, WORKFLOW, body_spec, **extra), status, code)
    # WF-5, WF-8: rejected before side effects; nothing was created, not even for a moment.
    r = await api.c.get(f"/v2/spaces/{api.space}/resources", params={"name": name}, headers=api.h)
    assert r.json()["items"] == []
    return body


async def deploy(api: Api, worker: str, *versions: str, name: str | None = None) -> Any:
    weights = [100 // len(versions) + (100 % len(versions) if i == 0 else 0) for i in range(len(versions))]
    return await api.post(
        name or f"d-{uuid.uuid4().hex[:8]}",
        DEPLOYMENT,
        {
            "worker": {"resourceUid": worker},
            "versions": [
                {"version": {"resourceUid": v}, "percentage": p} for v, p in zip(versions, weights, strict=True)
            ],
        },
    )


async def observed(api: Api, uid: str) -> dict[str, Any]:
    r = await api.get(uid)
    assert r.status_code == 200, r.text
    return r.json()["observed"]  # type: ignore[no-any-return]


async def eventually_ready(api: Api, uid: str, ready: bool, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        seen = await observed(api, uid)
        if seen.get("ready") is ready:
            return seen
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.1)


async def test_spec_is_closed_and_complete(api: Api) -> None:  # WF-1
    w = await api.worker(handlers=(), deploy=False)
    good = spec(w)
    for field in ("worker", "className"):
        body = await rejected(api, {k: v for k, v in good.items() if k != field}, 400, "invalid_spec")  # no defaults
        assert body["errors"][0]["path"] == f"/spec/{field}"
    body = await rejected(api, {**good, "extra": 1}, 400, "invalid_spec")
    assert body["errors"][0]["path"] == "/spec/extra"
    for ref in ({"resourceUid": w, "name": "x"}, {}, w, None):
        await rejected(api, {**good, "worker": ref}, 400, "invalid_spec")
    for name in (None, "", "9Flow", "Fl-ow", "A" * 65, "Flow\n", 7):
        body = await rejected(api, spec(w, name), 400, "invalid_spec")  # type: ignore[arg-type]
        assert body["errors"][0]["path"] == "/spec/className"
    await rejected(api, good, 400, "invalid_spec", privateInputs={"token": "x"})  # no secret inputs


async def test_references_are_checked_before_side_effects(api: Api, host: Any) -> None:  # WF-2, WF-15
    queue = await api.queue()
    await rejected(api, spec("res_missing"), 409, "dependency_conflict")
    body = await rejected(api, spec(queue), 409, "dependency_conflict")  # wrong Form
    assert "ModuleWorker" in body["detail"]
    # Another Space's worker reads as not found, revealing nothing.
    other = f"sp-{uuid.uuid4().hex[:10]}"
    admin = auth(host.admin_token)
    assert (await api.c.post("/v2/spaces", json={"name": other}, headers=admin)).status_code == 201
    r = await api.c.post(
        f"/v2/spaces/{other}/resources",
        headers={**admin, "Idempotency-Key": uuid.uuid4().hex},
        json={"name": "w", "form": WORKER, "spec": {"runtime": "javascript", "handlers": []}},
    )
    foreign = r.json()["resourceUid"]
    done = await api.c.get(f"/v2/operations/{r.json()['id']}?wait=30", headers=admin)
    assert done.json()["state"] == "succeeded", done.text
    body = await rejected(api, spec(foreign), 409, "dependency_conflict")
    assert "not found" in body["detail"]
    w = await api.worker(handlers=(), deploy=False)
    viewer = await api.c.post(
        f"/v2/spaces/{api.space}/resources",
        headers={**auth(api.viewer), "Idempotency-Key": uuid.uuid4().hex},
        json={"name": "wf-v", "form": WORKFLOW, "spec": spec(w)},
    )
    assert_problem(viewer, 403, "forbidden")  # the caller must be allowed to use it


async def test_create_without_deployment_is_allowed_not_ready(api: Api) -> None:  # WF-3, WF-7, WF-9, WF-10
    w = await api.worker(handlers=(), deploy=False)
    uid = await api.create("wf-a", WORKFLOW, spec(w))
    r = await api.get(uid)
    body = r.json()
    assert body["form"] == WORKFLOW and body["state"] == "active" and body["output"] == {}
    seen = body["observed"]
    assert seen["ready"] is False
    assert seen["instanceCounts"] == dict.fromkeys(STATUSES, 0)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", seen["observedAt"])
    # Once a Deployment weights a Version with the class, the Workflow is Ready.
    version = await api.version(w, FLOW_JS)
    await api.done(await deploy(api, w, version))
    await eventually_ready(api, uid, True)


async def test_ready_when_deployed_with_the_class(api: Api) -> None:  # WF-3, WF-9, WF-28
    w = await api.worker(source=FLOW_JS, handlers=())
    uid = await api.create("wf-b", WORKFLOW, spec(w))
    assert (await observed(api, uid))["ready"] is True


async def test_missing_class_is_dependency_conflict(api: Api) -> None:  # WF-4, WF-5, WF-28
    w = await api.worker(source=NO_FLOW_JS, handlers=())
    body = await rejected(api, spec(w), 409, "dependency_conflict")
    assert "Flow" in body["detail"]
    # Any weighted Version lacking it counts, whatever its percentage.
    w2 = await api.worker(handlers=(), deploy=False)
    good, bad = await api.version(w2, FLOW_JS), await api.version(w2, NO_FLOW_JS)
    await api.done(await deploy(api, w2, good, bad))
    body = await rejected(api, spec(w2), 409, "dependency_conflict")
    assert bad in body["detail"]


GENERATOR_JS = "export default {};\nexport function* Flow() {}\nFlow.prototype.run = function () {};\n"
# A run only the metaclass has: `Flow.run` exists, an instance's does not.
METACLASS_RUN_PY = "class Meta(type):\n    def run(cls):\n        pass\n\nclass Flow(metaclass=Meta):\n    pass\n"


@pytest.mark.parametrize(
    "runtime, source", [("javascript", GENERATOR_JS), ("python", METACLASS_RUN_PY)], ids=["generator", "metaclass"]
)
async def test_a_run_that_is_not_a_constructible_class_is_dependency_conflict(
    api: Api, runtime: str, source: str
) -> None:  # WF-5, WF-28
    w = await api.worker(handlers=(), deploy=False, runtime=runtime)
    version = await api.version(w, source, runtime=runtime)
    assert "Flow" not in (await observed(api, version))["workflowClasses"]
    await api.done(await deploy(api, w, version))
    body = await rejected(api, spec(w), 409, "dependency_conflict")
    assert "Flow" in body["detail"]


async def test_verifying_version_is_resource_busy_never_incompatible(api: Api) -> None:  # WF-4, WF-6, WF-17
    w = await api.worker(handlers=(), deploy=False)
    slow = await api.version(w, SLOW_FLOW_JS, wait=False)
    d = await deploy(api, w, slow)
    assert d.status_code == 202, d.text
    body = await rejected(api, spec(w), 409, "resource_busy")  # an accepted, unfinished Deployment create
    assert slow in body["detail"]
    op = await api.op(d.json()["id"])
    assert op["state"] == "succeeded", op
    uid = await api.create("wf-c", WORKFLOW, spec(w))
    assert (await observed(api, uid))["ready"] is True


async def test_put_allows_only_the_same_spec(api: Api) -> None:  # WF-11, WF-16
    w = await api.worker(source=FLOW_JS, handlers=())
    w2 = await api.worker(source=FLOW_JS, handlers=())
    uid = await api.create("wf-d", WORKFLOW, spec(w))
    body = assert_problem(await api.put(uid, spec(w, "Other")), 400, "invalid_spec")
    assert [e["path"] for e in body["errors"]] == ["/spec/className"]
    body = assert_problem(await api.put(uid, spec(w2)), 400, "invalid_spec")
    assert [e["path"] for e in body["errors"]] == ["/spec/worker"]
    assert (await api.get(uid)).json()["generation"] == 1
    key = uuid.uuid4().hex
    first = await api.done(await api.put(uid, spec(w), key=key))  # the same spec: a new generation
    assert first["generation"] == 2 and (await api.get(uid)).json()["generation"] == 2
    again = await api.put(uid, spec(w), key=key)  # the same key: the same Operation
    assert again.status_code == 202 and again.json()["id"] == first["id"]
    assert (await api.get(uid)).json()["generation"] == 2


async def test_delete_is_blocked_by_any_version_binding(api: Api) -> None:  # WF-12, WF-13, WF-15
    w = await api.worker(source=FLOW_JS, handlers=())
    uid = await api.create("wf-e", WORKFLOW, spec(w))
    bound = await api.version(w, FLOW_JS, workflow_bindings={"FLOW": uid})  # not weighted
    body = assert_problem(await api.delete(uid), 409, "dependency_conflict")
    assert bound in body["detail"]
    assert (await api.get(uid)).json()["state"] == "active"
    await api.done(await api.delete(bound))
    op = await api.done(await api.delete(uid))  # awaited until the engine has purged (WF-13)
    assert op["effect"] == "complete"
    assert_problem(await api.get(uid), 404, "not_found")
    # WF-15: nothing else goes with it.
    assert (await api.get(w)).status_code == 200
