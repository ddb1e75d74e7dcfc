"""Documents over real HTTP, through every part of the Host: numbers are IEEE doubles in the
one canonical form (DOC-1, DOC-2), nesting is bounded by one DOC limit (MAX_DEPTH), sizes
are refused while the body is read (DOC-6). JS and Python workflow classes on the real
engine, broker and database, in both engine modes (WF-36, WF-40, WF-41)."""

import json
import uuid

import httpx
import pytest

from sumi.core.canonical import MAX_DEPTH, loads
from tests.conformance.kit import Api, Flows
from tests.conformance.modes import engine_mode_host  # noqa: F401 (every test in both engine modes)
from tests.httpkit import WORKFLOW, assert_problem

pytestmark = pytest.mark.integration

FLOW_JS = """
export default {};
const nested = (depth) => { let d = {}; for (let i = 1; i < depth; i++) d = {a: d}; return d; };
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const p = event.params ?? {};
    if (p.mode === "big") {
      const r = await step.do("big", async () => { await this.env.COUNT.send("ran"); return { n: 2 ** p.e }; });
      return { n: r.n };
    }
    if (p.mode === "deep-run") return nested(p.depth);
    if (p.mode === "deep-step") {
      await step.do("deep", async () => { await this.env.COUNT.send("ran"); return nested(p.depth); });
      return {};
    }
    return { n: p.n };
  }
}
"""
FLOW_PY = """
class Flow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        p = event.get("params") or {}

        async def effect():
            await self.env.COUNT.send(b"ran")
            return {"n": 2 ** p["e"]}

        r = await step.do("big", effect)
        return {"n": r["n"]}
"""


async def _flows(api: Api, source: str, runtime: str = "javascript") -> tuple[Flows, str]:
    count = await api.queue(f"count-{uuid.uuid4().hex[:8]}")
    w = await api.worker(source=source, handlers=(), bindings={"COUNT": count}, runtime=runtime)
    spec = {"worker": {"resourceUid": w}, "className": "Flow"}
    return Flows(api, await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, spec)), count


@pytest.fixture
async def flows(api: Api) -> tuple[Flows, str]:
    return await _flows(api, FLOW_JS)


async def _raw(flows: Flows, body: bytes) -> httpx.Response:
    headers = {**flows.api.h, "content-type": "application/json"}
    return await flows.api.c.post(flows.base, headers=headers, content=body)


@pytest.mark.parametrize(
    ("literal", "canonical"),
    [
        ("9007199254740992", "9007199254740992"),  # 2**53
        ("9007199254740993", "9007199254740992"),  # read as the nearest double, as JSON.parse does
        ("1152921504606846977", "1152921504606847000"),  # 2**60 + 1
        ("1e308", "1e+308"),
        ("-0.0", "0"),
        ("5e-324", "5e-324"),
        ("2.2250738585072014e-308", "2.2250738585072014e-308"),
    ],
)
async def test_every_finite_number_is_a_document_value(flows: tuple[Flows, str], literal: str, canonical: str) -> None:
    # DOC-2: any finite double, through the gateway, the engine, the runtime and the projections
    wf, _ = flows
    r = await _raw(wf, b'{"params":{"n":' + literal.encode() + b"}}")
    assert r.status_code == 201, r.text
    iid = r.json()["id"]
    assert (await wf.until(iid, "complete", "errored", "terminated"))["status"] == "complete"
    got = await wf.get(iid)
    assert loads(got.text)["output"] == {"n": float(literal)}, got.text
    assert f'"output":{{"n":{canonical}}}' in got.text, got.text  # the canonical form, not Postgres' decimals
    history = await wf.history(iid)
    assert f'"params":{{"n":{canonical}}}' in history.text, history.text


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "1" + "0" * 400, "1" + "0" * 5000])
async def test_numbers_beyond_the_doubles_are_invalid_params(flows: tuple[Flows, str], literal: str) -> None:  # DOC-2
    wf, _ = flows
    assert_problem(await _raw(wf, b'{"params":{"n":' + literal.encode() + b"}}"), 400, "invalid_params")


@pytest.mark.parametrize("power", [53, 60])
async def test_a_step_result_beyond_2_53_commits_once(flows: tuple[Flows, str], power: int) -> None:
    # DOC-2, WF-40, WF-41: {n: 2**53} and {n: 2**60} are documents; the effect runs once
    wf, count = flows
    iid = await wf.started(params={"mode": "big", "e": power})
    done = await wf.until(iid, "complete", "errored", "terminated", timeout=60)
    assert done["status"] == "complete" and loads(json.dumps(done["output"])) == {"n": 2.0**power}, done
    history = loads((await wf.history(iid)).text)["items"]
    steps = [h["data"] for h in history if h["type"] == "StepAttemptCommitted"]
    assert [(s["name"], s["ok"], s["result"]) for s in steps] == [("big", True, {"n": 2.0**power})], history
    assert (await wf.api.stats(count))["ready"] == 1  # the effect ran exactly once


async def test_a_python_step_result_beyond_2_53_commits_once(api: Api) -> None:
    # DOC-2, WF-40, WF-41: a Python int is read as the nearest double (docs/decisions.md)
    wf, count = await _flows(api, FLOW_PY, runtime="python")
    for power in (53, 60):
        iid = await wf.started(params={"e": power})
        done = await wf.until(iid, "complete", "errored", "terminated", timeout=60)
        assert done["status"] == "complete" and loads(json.dumps(done["output"])) == {"n": 2.0**power}, done
        history = loads((await wf.history(iid)).text)["items"]
        steps = [h["data"] for h in history if h["type"] == "StepAttemptCommitted"]
        assert [(s["name"], s["ok"], s["result"]) for s in steps] == [("big", True, {"n": 2.0**power})]
    assert (await api.stats(count))["ready"] == 2  # each effect ran exactly once


def _nested(depth: int) -> bytes:
    return b'{"params":' + b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1) + b"}"


async def test_params_depth_bound(flows: tuple[Flows, str]) -> None:  # DOC-1, DOC-6: MAX_DEPTH, the root counted
    wf, _ = flows
    assert (await _raw(wf, _nested(MAX_DEPTH))).status_code == 201
    for depth in (MAX_DEPTH + 1, 1000, 5000):
        body = assert_problem(await _raw(wf, _nested(depth)), 400, "invalid_params")
        assert "nested" in body["detail"], body


async def test_a_too_deep_result_ends_the_instance(flows: tuple[Flows, str]) -> None:
    # DOC-1 (MAX_DEPTH), WF-22: run() returning a document 1,500 deep is run_threw; a step.do effect's
    # is a failed attempt (step_failed): never an instance left running
    wf, count = flows
    ran = await wf.started(params={"mode": "deep-run", "depth": 1500})
    done = await wf.until(ran, "complete", "errored", "terminated", timeout=60)
    assert done["status"] == "errored" and done["error"]["reason"] == "run_threw", done
    stepped = await wf.started(params={"mode": "deep-step", "depth": 1500})
    done = await wf.until(stepped, "complete", "errored", "terminated", timeout=60)
    assert done["status"] == "errored" and done["error"]["reason"] == "step_failed", done
    steps = [h["data"] for h in (await wf.history(stepped)).json()["items"] if h["type"] == "StepAttemptCommitted"]
    assert [(s["name"], s["ok"]) for s in steps] == [("deep", False)], steps
    assert "nested deeper than 128" in steps[0]["errorMessage"], steps
    assert (await wf.api.stats(count))["ready"] == 1
    at_bound = await wf.started(params={"mode": "deep-run", "depth": MAX_DEPTH})
    done = await wf.until(at_bound, "complete", "errored", "terminated", timeout=60)
    assert done["status"] == "complete", done


async def test_a_body_over_the_bound_is_refused_while_read(flows: tuple[Flows, str]) -> None:  # DOC-1, DOC-6
    wf, _ = flows
    huge = b'{"params":{"s":"' + b"x" * (15 * 1024 * 1024) + b'"}}'
    assert_problem(await _raw(wf, huge), 413, "document_too_large")
    many = b'{"params":{"a":[' + b",".join([b"1"] * (4 * 1024 * 1024)) + b"]}}"  # 8 MiB, 4 Mi numbers
    assert_problem(await _raw(wf, many), 413, "document_too_large")
    assert_problem(await _raw(wf, b'{"params":{"s":"' + b"x" * 1_048_576 + b'"}}'), 413, "document_too_large")
    assert (await _raw(wf, b'{"params":{"s":"' + b"x" * 1_000_000 + b'"}}')).status_code == 201
