"""Every valid document and name comes back as it went in, over real HTTP (DOC-1, DOC-2,
WF-19..23, WF-34): through GET and the history, with nothing quarantined, and `sumi
replay` rebuilds the same read models (architecture rule 1). PostgreSQL's text refuses
U+0000, so these are the values a read model would otherwise lose."""

import asyncio
import itertools
import uuid
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sumi.core.canonical import canonical
from sumi.host.audit import replay_and_compare
from sumi.wire import pgtext
from tests.conformance.kit import Api, Flows
from tests.conformance.modes import engine_mode_host  # noqa: F401 (every test in both engine modes)
from tests.hostkit import Host
from tests.httpkit import VERSION as WORKER_VERSION
from tests.httpkit import WORKFLOW

pytestmark = pytest.mark.integration

# The instance ID names its step and the event it waits for; params come back as the step's
# result, the event's payload as the output. params.throw, when given, is thrown as an Error.
ECHO_JS = """
export default {};
export class Echo {
  async run(event, step) {
    const id = event.instanceId;
    const params = event.params;
    if (params !== undefined && typeof params.throw === "string") throw new Error(params.throw);
    const lone = "x" + String.fromCharCode(0xd800) + "y";  // not well-formed: a lone surrogate
    if (params !== undefined && params.lone === "run") throw new Error(lone);
    if (params !== undefined && params.lone === "step") await step.do("s", async () => { throw new Error(lone); });
    await step.do(id, async () => params);
    return await step.waitForEvent("w", { type: id, timeoutSeconds: 3600 });
  }
}
"""
NUL = "a\x00b"


@pytest.fixture
async def echo(api: Api) -> Flows:
    worker = await api.worker(source=ECHO_JS, handlers=())
    spec = {"worker": {"resourceUid": worker}, "className": "Echo"}
    return Flows(api, await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, spec))


async def quarantined(host: Host) -> int:
    async with await psycopg.AsyncConnection.connect(host.settings.database_url, context=pgtext.ADAPTERS) as conn:
        cur = await conn.execute(f'SELECT count(*) FROM "{host.settings.db_schema}".quarantined')
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def until_history(flows: Flows, iid: str, kind: str, timeout: float = 60) -> list[dict[str, Any]]:
    """The history once it holds a record of `kind`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        r = await flows.history(iid)
        if r.status_code == 200 and any(h["type"] == kind for h in r.json()["items"]):
            return r.json()["items"]  # type: ignore[no-any-return]
        assert asyncio.get_running_loop().time() < deadline, r.text
        await asyncio.sleep(0.1)


def same(a: Any, b: Any) -> bool:
    """One document: equal canonical forms (DOC-2: numbers are doubles, so 5.4e16 and the
    integer literal the Host writes for it are the same number)."""
    return canonical(a) == canonical(b)


async def round_trip(flows: Flows, iid: str, params: dict[str, Any], payload: dict[str, Any]) -> None:
    """One instance through every document path: params, step result, event payload, output."""
    r = await flows.create({"id": iid, "params": params})
    assert r.status_code == 201 and r.json() == {"id": iid, "status": "queued"}, r.text
    await until_history(flows, iid, "WaitScheduled")
    assert (await flows.event(iid, {"type": iid, "payload": payload})).status_code == 202
    done = await flows.until(iid, "complete", "errored")
    assert done["status"] == "complete" and same(done, {"id": iid, "status": "complete", "output": payload}), done
    history = (await flows.history(iid)).json()["items"]
    assert same(history[0]["data"]["params"], params)
    step = next(h["data"] for h in history if h["type"] == "StepAttemptCommitted" and h["data"]["kind"] == "do")
    assert step["name"] == iid and same(step["result"], params)
    event = next(h["data"] for h in history if h["type"] == "EventAccepted")
    assert event["type"] == iid and same(event["payload"], payload)
    wait = next(h["data"] for h in history if h["type"] == "WaitScheduled")
    assert wait["eventType"] == iid
    assert same(history[-1]["data"], {"status": "complete", "output": payload})


async def test_nul_in_an_id_params_step_event_and_output(host: Host, echo: Flows) -> None:
    # DOC-2, WF-19, WF-20, WF-21, WF-23, WF-34: U+0000 in every place a string can go
    before = await quarantined(host)
    iid = f"k{NUL}\x01\x02"
    params = {"s": NUL, NUL: ["\x00", "\x01", {"\x00\x00": NUL}], "\x01": "\x01\x00"}
    await round_trip(echo, iid, params, {"p": "\x00", "q": [NUL]})
    listed = (await echo.api.c.get(echo.base, headers=echo.api.h)).json()["items"]
    assert [i["id"] for i in listed] == [iid]
    assert (await echo.get("k")).status_code == 404  # the ID is the whole ID
    assert await quarantined(host) == before


async def test_nul_in_an_error_message_thrown_by_run(host: Host, echo: Flows) -> None:  # WF-21, WF-22, DOC-2
    before = await quarantined(host)
    iid = await echo.started(params={"throw": f"bad{NUL}news"})
    done = await echo.until(iid, "complete", "errored")
    assert done["status"] == "errored" and done["error"]["reason"] == "run_threw"
    assert f"bad{NUL}news" in done["error"]["message"], done
    last = (await echo.history(iid)).json()["items"][-1]["data"]
    assert last["errorMessage"] == done["error"]["message"]
    assert await quarantined(host) == before


@pytest.mark.parametrize("where", ["run", "step"])
async def test_an_ill_formed_error_message_is_made_well_formed(host: Host, echo: Flows, where: str) -> None:
    # WF-21, WF-22, WF-45: a JS message may hold a lone surrogate; the runtime boundary replaces it
    before = await quarantined(host)
    iid = await echo.started(params={"lone": where})
    done = await echo.until(iid, "complete", "errored")
    reason = "run_threw" if where == "run" else "step_failed"
    assert done["status"] == "errored" and done["error"]["reason"] == reason, done
    assert "x\ufffdy" in done["error"]["message"], done
    history = (await echo.history(iid)).json()["items"]
    assert history[-1]["data"]["errorMessage"] == done["error"]["message"]
    if where == "step":
        step = next(h["data"] for h in history if h["type"] == "StepAttemptCommitted")
        assert step["ok"] is False and "x\ufffdy" in step["errorMessage"], step
    assert await quarantined(host) == before


async def test_nul_in_an_id_terminated(host: Host, echo: Flows) -> None:  # WF-19, WF-26
    iid = f"t{NUL}"
    assert (await echo.create({"id": iid, "params": {}})).status_code == 201
    await until_history(echo, iid, "WaitScheduled")
    r = await echo.terminate(iid)
    assert r.status_code == 200 and r.json() == {"id": iid, "status": "terminated"}, r.text
    assert (await echo.get(iid)).json() == {"id": iid, "status": "terminated"}
    again = await echo.create({"id": iid, "params": {}})
    assert again.status_code == 409 and again.json()["code"] == "instance_exists"


async def test_instances_list_in_code_point_order_across_pages(echo: Flows) -> None:  # WF-19 (paging)
    ids = ["a", "a\x00", "a\x00\x00", "a\x01", "a\x02", "a\U0001f600", "a\uffff", "b"]
    for iid in reversed(ids):
        assert (await echo.create({"id": iid, "params": {}})).status_code == 201
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        page = (await echo.api.c.get(echo.base, headers=echo.api.h, params=params)).json()
        seen += [i["id"] for i in page["items"]]
        if (cursor := page["nextCursor"]) is None:
            break
    assert seen == sorted(ids)  # Python orders str by code point


# ---- the property: any document and name (DOC-1, DOC-2) --------------------------------------

# Every class of code point a string may hold: U+0000 and the other C0 controls, U+2028/9,
# the BOM, the largest BMP and non-BMP scalar values (no lone surrogates: not Unicode scalars).
TEXT = st.text(
    st.one_of(
        st.sampled_from(["\x00", "\x01", "\x1f", "\x7f", "\u2028", "\u2029", "\ufeff", "\uffff", "\U0010ffff"]),
        st.characters(codec="utf-8"),
    ),
    max_size=12,
)
NAMES = st.text(st.characters(codec="utf-8"), min_size=1, max_size=240) | st.sampled_from(["\x00", "\x00" * 240])


def doubles() -> st.SearchStrategy[Any]:
    """Every finite IEEE double (DOC-2: numbers are doubles, one RFC 8785 form everywhere):
    subnormals, -0.0, 1e308, and integers past 2**53 that a double holds exactly."""
    floats = st.floats(allow_nan=False, allow_infinity=False)
    return st.integers(-(2**53) + 1, 2**53 - 1) | floats | floats.filter(float.is_integer).map(int)


VALUES = st.recursive(
    st.none() | st.booleans() | doubles() | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
DOCUMENTS = st.dictionaries(TEXT, VALUES, max_size=6)
# Near DOC-1's limits: 1024 root properties, and one string of almost 1 MiB (with room for the
# ID that also names the step and the event; U+0000 is 6 canonical bytes).
WIDE = st.just({f"k{i}\x00": i for i in range(1024)})
LARGE = st.sampled_from([("x", 1), ("\x00", 6)]).map(lambda c: {"big": c[0] * ((1024 * 1024 - 2048) // c[1])})
_serial = itertools.count()


@settings(
    max_examples=10,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=NAMES, params=DOCUMENTS | WIDE | LARGE, payload=DOCUMENTS | WIDE, message=TEXT)
async def test_any_document_comes_back_equal(echo: Flows, name: str, params: Any, payload: Any, message: str) -> None:
    # DOC-1, DOC-2, WF-19, WF-23, WF-34: params, step results, event payloads and outputs;
    # WF-21, WF-22: and an error's message, as `run` threw it
    await round_trip(echo, f"{next(_serial)}:{name}"[:256], params, payload)
    thrown = await echo.started(id=f"{next(_serial)}:e", params={"throw": message})
    errored = await echo.until(thrown, "complete", "errored")
    assert errored["error"]["reason"] == "run_threw", errored
    assert message in errored["error"].get("message", ""), errored


async def test_replay_after_the_documents_is_identical(host: Host, echo: Flows) -> None:
    # Rule 1, DOC-2: the same documents, rebuilt from the topics, give the same rows
    await round_trip(echo, f"r{NUL}", {"s": NUL, "n": [0.1, 2**53 - 1]}, {"e": "\x00\u2028\ufeff"})
    iid = await echo.started(params={"throw": NUL})
    await echo.until(iid, "errored")
    await asyncio.sleep(1.0)  # the engine's last instance-count report lands first
    audit = await replay_and_compare(host.settings)
    assert audit.differences == [] and audit.quarantined == []


async def test_nul_in_a_version_spec_and_its_failure(host: Host, api: Api) -> None:
    # DOC-2, WF-10: Resources (spec, observed) and Operations (error) hold any string too
    before = await quarantined(host)
    worker = await api.worker(source=ECHO_JS, handlers=(), deploy=False)
    source = ECHO_JS + '\nexport const odd = "a\x00b";\n'
    uid = await api.version(worker, source, vars={"V": NUL})
    spec = (await api.get(uid)).json()["spec"]
    assert spec["vars"] == {"V": NUL} and spec["modules"][0]["content"] == source
    failing = await api.post(
        f"v-{uuid.uuid4().hex[:8]}",
        WORKER_VERSION,
        {
            "worker": {"resourceUid": worker},
            "mainModule": "worker.js",
            "modules": [{"name": "worker.js", "content": f'throw new Error("load{NUL}failed");'}],
        },
    )
    op = await api.done(failing, state="failed")
    assert f"load{NUL}failed" in op["error"]["detail"], op
    assert await quarantined(host) == before
