"""WorkerVersion 0.5.0 and WorkerDeployment 0.4.0 over real HTTP against a real Host.

The `host` fixture runs every service, the verifier (`sumi.verifier`)
included: a Version's create Operation ends only once its module was loaded in
the real JavaScript or Python runtime.
"""

from typing import Any

import httpx
import pytest

from tests.httpkit import DEPLOYMENT, QUEUE, VERSION, WORKER, assert_problem, auth, key

pytestmark = pytest.mark.integration


GOOD_JS = """
import { twice } from "./lib/twice.mjs";
export default { async queue(batch, env, ctx) { await batch.acknowledgeAll(); } };
export class ReportWorkflow { async run(event, step) { return twice(1); } }
export class NotAWorkflow {}
"""
TWICE = "export const twice = (x) => x * 2;\n"
GOOD_PY = """
async def queue(batch, env, ctx):
    await batch.acknowledge_all()

class ReportWorkflow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        return None
"""


class Api:
    def __init__(self, client: httpx.AsyncClient, space: Any) -> None:
        self.c = client
        self.space = space.name
        self.h = auth(space.editor_token)

    async def post(self, name: str, form: str, spec: dict[str, Any]) -> httpx.Response:
        return await self.c.post(
            f"/v2/spaces/{self.space}/resources",
            headers={**self.h, **key()},
            json={"name": name, "form": form, "spec": spec},
        )

    async def put(self, uid: str, spec: dict[str, Any]) -> httpx.Response:
        return await self.c.put(
            f"/v2/spaces/{self.space}/resources/{uid}",
            headers={**self.h, **key()},
            json={"spec": spec},
        )

    async def delete(self, uid: str) -> httpx.Response:
        return await self.c.delete(f"/v2/spaces/{self.space}/resources/{uid}", headers={**self.h, **key()})

    async def get(self, uid: str) -> httpx.Response:
        return await self.c.get(f"/v2/spaces/{self.space}/resources/{uid}", headers=self.h)

    async def wait(self, response: httpx.Response) -> dict[str, Any]:
        assert response.status_code == 202, response.text
        op = response.json()
        r = await self.c.get(f"/v2/operations/{op['id']}?wait=30", headers=self.h)
        assert r.status_code == 200, r.text
        assert r.json()["state"] in ("succeeded", "failed"), r.json()
        return r.json()  # type: ignore[no-any-return]

    async def make(self, name: str, form: str, spec: dict[str, Any]) -> dict[str, Any]:
        op = await self.wait(await self.post(name, form, spec))
        assert op["state"] == "succeeded", op
        r = await self.get(op["resourceUid"])
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    async def worker(
        self, name: str = "w", runtime: str = "javascript", handlers: list[str] | None = None
    ) -> dict[str, Any]:
        return await self.make(
            name,
            WORKER,
            {"runtime": runtime, "handlers": ["queue"] if handlers is None else handlers},
        )

    async def version(
        self,
        name: str,
        worker: dict[str, Any],
        modules: dict[str, str],
        main: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The create Operation of a Version, awaited until verification ends."""
        return await self.wait(await self.post(name, VERSION, version_spec(worker, modules, main, **extra)))


def version_spec(
    worker: dict[str, Any], modules: dict[str, str], main: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "worker": {"resourceUid": worker["uid"]},
        "mainModule": main or next(iter(modules)),
        "modules": [{"name": n, "content": c} for n, c in modules.items()],
        **extra,
    }


def deployment(worker: dict[str, Any], *weights: tuple[str, int]) -> dict[str, Any]:
    return {
        "worker": {"resourceUid": worker["uid"]},
        "versions": [{"version": {"resourceUid": v}, "percentage": p} for v, p in weights],
    }


@pytest.fixture
def api(client: httpx.AsyncClient, space: Any) -> Api:
    return Api(client, space)


# ---- WorkerVersion -------------------------------------------------------------------------


async def test_a_good_js_version_verifies(api: Api) -> None:
    # WF-28: workflowClasses lists the constructible exports with a callable run.
    w = await api.worker()
    op = await api.version("v1", w, {"worker.js": GOOD_JS, "lib/twice.mjs": TWICE}, vars={"GREETING": "hi"})
    assert op["state"] == "succeeded" and op["effect"] == "complete", op
    v = (await api.get(op["resourceUid"])).json()
    assert v["state"] == "active"
    assert v["observed"] == {
        "verified": True,
        "handlers": ["queue"],
        "workflowClasses": ["ReportWorkflow"],
    }
    w_now = (await api.get(w["uid"])).json()
    assert w_now["observed"] == {"activeDeployment": None, "versions": 1}


async def test_a_syntax_error_fails_and_leaves_no_resource(api: Api) -> None:
    w = await api.worker()
    op = await api.version("broken", w, {"worker.js": "export default { async queue(b) {"})
    assert op["state"] == "failed" and op["error"]["code"] == "invalid_spec", op
    assert "SyntaxError" in op["error"]["detail"]
    assert_problem(await api.get(op["resourceUid"]), 404, "not_found")
    # The name is free again.
    op = await api.version("broken", w, {"worker.js": "export default { async queue() {} };"})
    assert op["state"] == "succeeded", op


async def test_a_version_lacking_the_declared_queue_handler_fails(api: Api) -> None:
    # QC-16: the worker declares "queue", so every Version must provide it.
    w = await api.worker()
    op = await api.version("v1", w, {"worker.js": "export default {};\nexport class W { run() {} }"})
    assert op["state"] == "failed" and op["error"]["code"] == "invalid_spec", op
    assert "queue" in op["error"]["detail"]
    # A worker that declares no handler takes the same module.
    bare = await api.worker("bare", handlers=[])
    op = await api.version("v1", bare, {"worker.js": "export default {};\nexport class W { run() {} }"})
    assert op["state"] == "succeeded", op
    assert (await api.get(op["resourceUid"])).json()["observed"] == {
        "verified": True,
        "handlers": [],
        "workflowClasses": ["W"],
    }


async def test_a_python_version_verifies(api: Api) -> None:
    w = await api.worker("pw", runtime="python")
    op = await api.version("v1", w, {"worker.py": GOOD_PY})
    assert op["state"] == "succeeded", op
    v = (await api.get(op["resourceUid"])).json()
    assert v["observed"] == {
        "verified": True,
        "handlers": ["queue"],
        "workflowClasses": ["ReportWorkflow"],
    }
    op = await api.version("v2", w, {"worker.py": "raise RuntimeError('no')\n"})
    assert op["state"] == "failed" and op["error"]["code"] == "invalid_spec", op


async def test_version_spec_rules_and_references(api: Api) -> None:
    w = await api.worker()
    r = await api.post("v", VERSION, version_spec(w, {"../worker.js": GOOD_JS}))
    assert_problem(r, 400, "invalid_spec")
    r = await api.post("v", VERSION, version_spec(w, {"worker.py": GOOD_PY}))  # a JS worker
    assert assert_problem(r, 400, "invalid_spec")["errors"][0]["path"] == "/spec/modules/0/name"
    r = await api.post("v", VERSION, version_spec({"uid": "res_nope"}, {"worker.js": GOOD_JS}))
    assert_problem(r, 409, "dependency_conflict")
    bindings = [{"name": "OUT", "queue": {"resourceUid": w["uid"]}}]  # a worker is no queue
    r = await api.post("v", VERSION, version_spec(w, {"worker.js": GOOD_JS}, queueBindings=bindings))
    assert_problem(r, 409, "dependency_conflict")
    q = await api.make("q", QUEUE, {"retentionSeconds": 60})
    bindings = [{"name": "OUT", "queue": {"resourceUid": q["uid"]}}]
    op = await api.version("v", w, {"worker.js": GOOD_JS, "lib/twice.mjs": TWICE}, queueBindings=bindings)
    assert op["state"] == "succeeded", op
    # Immutable: an identical PUT is accepted, anything else is invalid_spec.
    spec = version_spec(w, {"worker.js": GOOD_JS, "lib/twice.mjs": TWICE}, queueBindings=bindings)
    same = await api.wait(await api.put(op["resourceUid"], spec))
    assert same["state"] == "succeeded" and same["generation"] == 2
    assert_problem(await api.put(op["resourceUid"], {**spec, "vars": {"A": "b"}}), 400, "invalid_spec")


# ---- WorkerDeployment ------------------------------------------------------------------------


async def test_deployment_validation(api: Api) -> None:
    w = await api.worker()
    other = await api.worker("other")
    v1 = (await api.version("v1", w, {"worker.js": GOOD_JS, "lib/twice.mjs": TWICE}))["resourceUid"]
    v2 = (await api.version("v2", w, {"worker.js": GOOD_JS, "lib/twice.mjs": TWICE}))["resourceUid"]
    foreign = (await api.version("fv", other, {"worker.js": GOOD_JS, "lib/twice.mjs": TWICE}))["resourceUid"]
    # Percentages must sum to exactly 100.
    body = assert_problem(await api.post("d", DEPLOYMENT, deployment(w, (v1, 50), (v2, 40))), 400, "invalid_spec")
    assert body["errors"][0]["path"] == "/spec/versions"
    # A Version of another worker.
    assert_problem(
        await api.post("d", DEPLOYMENT, deployment(w, (v1, 50), (foreign, 50))),
        409,
        "dependency_conflict",
    )
    d = await api.make("d", DEPLOYMENT, deployment(w, (v1, 30), (v2, 70)))
    assert d["state"] == "active"
    assert (await api.get(w["uid"])).json()["observed"] == {
        "activeDeployment": {"resourceUid": d["uid"]},
        "versions": 2,
    }
    # At most one Deployment per worker.
    assert_problem(await api.post("d2", DEPLOYMENT, deployment(w, (v1, 100))), 409, "dependency_conflict")
    # The worker is immutable.
    assert_problem(await api.put(d["uid"], deployment(other, (foreign, 100))), 400, "invalid_spec")
    # A weighted Version cannot be deleted; once it is no longer weighted it can.
    assert_problem(await api.delete(v2), 409, "dependency_conflict")
    moved = await api.wait(await api.put(d["uid"], deployment(w, (v1, 100))))
    assert moved["state"] == "succeeded"
    gone = await api.wait(await api.delete(v2))
    assert gone["state"] == "succeeded"
    assert (await api.get(w["uid"])).json()["observed"]["versions"] == 1


async def test_weighting_a_verifying_version_is_accepted_then_succeeds(api: Api) -> None:
    # WF-6: pending verification is never taken as incompatibility; the change waits for it.
    w = await api.worker()
    slow = GOOD_JS + "\nconst until = Date.now() + 1500; while (Date.now() < until) {}\n"
    created = await api.post("v1", VERSION, version_spec(w, {"worker.js": slow, "lib/twice.mjs": TWICE}))
    assert created.status_code == 202, created.text
    v1 = created.json()["resourceUid"]
    verifying = (await api.get(v1)).json()
    assert verifying["state"] == "creating" and verifying["observed"] == {"verified": False}
    r = await api.post("d", DEPLOYMENT, deployment(w, (v1, 100)))
    assert r.status_code == 202, r.text
    op = await api.wait(r)
    assert op["state"] == "succeeded", op
    assert (await api.get(v1)).json()["observed"]["verified"] is True
    assert (await api.get(op["resourceUid"])).json()["state"] == "active"
    # Read your writes: the worker already shows its active Deployment.
    assert (await api.get(w["uid"])).json()["observed"]["activeDeployment"] == {"resourceUid": op["resourceUid"]}


async def test_a_pending_update_whose_version_fails_keeps_the_previous_allocation(api: Api) -> None:
    w = await api.worker()
    v1 = (await api.version("v1", w, {"worker.js": GOOD_JS, "lib/twice.mjs": TWICE}))["resourceUid"]
    d = await api.make("d", DEPLOYMENT, deployment(w, (v1, 100)))
    slow_broken = "const until = Date.now() + 1500; while (Date.now() < until) {}\nexport default {};"
    created = await api.post("v2", VERSION, version_spec(w, {"worker.js": slow_broken}))
    assert created.status_code == 202, created.text
    v2 = created.json()["resourceUid"]
    op = await api.wait(await api.put(d["uid"], deployment(w, (v1, 50), (v2, 50))))
    assert op["state"] == "failed" and op["error"]["code"] == "dependency_conflict", op
    after = (await api.get(d["uid"])).json()
    assert after["state"] == "active" and after["spec"] == deployment(w, (v1, 100))
    assert after["generation"] == 2


async def test_a_version_near_the_size_limit_travels_the_log(client: httpx.AsyncClient, space: Any) -> None:
    # forms.md: total module size up to 10 MiB; the records that carry it must fit Kafka too.
    api = Api(client, space)
    w = await api.worker("big")
    filler = "// " + "x" * (9 * 1024 * 1024) + "\n"
    source = GOOD_JS.replace('import { twice } from "./lib/twice.mjs";', "const twice = (x) => 2 * x;")
    op = await api.version("big-v1", w, {"worker.js": filler + source})
    assert op["state"] == "succeeded", op
    got = (await api.get(op["resourceUid"])).json()
    assert got["observed"]["verified"] is True and got["observed"]["handlers"] == ["queue"]
    assert len(got["spec"]["modules"][0]["content"]) > 9 * 1024 * 1024
