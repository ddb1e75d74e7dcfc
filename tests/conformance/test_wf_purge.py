"""Purge means purge, read from the topics as an auditor would (WF-13, WF-25, WF-47): what the Form
says is purged is not readable on any topic of the Host, neither in plain bytes nor after opening
the sealed documents with every key the key topic still holds, while `sumi replay` still equals
the live read models. Every marker below is a string only this test writes: in params, in a
step's result, in event payloads (a matched and an unmatched event), in outputs and in an error
message. Both engine modes (modes.py); the retention purge on a Host of its own.
"""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import pytest

from sumi.host.audit import replay_and_compare
from tests.auditkit import Topics, read_topics
from tests.conformance.kit import Api, Flows
from tests.conformance.modes import engine_mode_host  # noqa: F401 (every test in both engine modes)
from tests.hostkit import Host, new_settings, new_space, running_host
from tests.httpkit import WORKFLOW, assert_problem

pytestmark = pytest.mark.integration

FLOW_JS = """
export default {};
export class Flow {
  async run(event, step) {
    const mark = (what) => event.params.tag.replace("-PARAMS", what);  // no marker holds another
    const noted = await step.do("note", async () => ({ note: mark("-STEP") }));
    if (event.params.mode === "throw") throw new Error(mark("-ERROR"));
    const got = await step.waitForEvent("approval", { type: "go", timeoutSeconds: 3600 });
    return { out: mark("-OUTPUT"), noted, got };
  }
}
"""


async def workflow(api: Api) -> Flows:
    w = await api.worker(source=FLOW_JS, handlers=())
    uid = await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": w}, "className": "Flow"})
    return Flows(api, uid)


def markers(tag: str) -> dict[str, str]:
    """What an instance tagged `tag` leaves: each where it came from."""
    return {
        "params": f"{tag}-PARAMS",
        "step result": f"{tag}-STEP",
        "output": f"{tag}-OUTPUT",
        "error": f"{tag}-ERROR",
        "matched event": f"{tag}-MATCHED",
        "unmatched event": f"{tag}-UNMATCHED",
    }


async def ended(flows: Flows, iid: str, tag: str) -> None:
    """A complete instance that consumed one event and left another unmatched."""
    await flows.until(iid, "waiting")
    assert (await flows.event(iid, {"type": "other", "payload": {"m": f"{tag}-UNMATCHED"}})).status_code == 202
    assert (await flows.event(iid, {"type": "go", "payload": {"m": f"{tag}-MATCHED"}})).status_code == 202
    await flows.until(iid, "complete")


async def until_gone(host: Host, wanted: list[str], where: Callable[[Topics, str], list[str]]) -> Topics:
    """The topics once `where` finds none of `wanted` there (a decided command is deleted from
    its topic a moment after the offsets past it are committed)."""
    deadline = time.monotonic() + 30
    while True:
        topics = await read_topics(host.settings)
        found = {m: hits for m in wanted if (hits := where(topics, m))}
        if not found:
            return topics
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.5)


async def until_unreadable(host: Host, *wanted: str) -> Topics:
    return await until_gone(host, list(wanted), Topics.readable)


async def settled_replay(host: Host) -> None:
    await asyncio.sleep(1.5)  # the engine's last instance-count report lands first
    audit = await replay_and_compare(host.settings)
    assert audit.differences == [] and audit.quarantined == [], audit.lines()


def tagged() -> str:
    return f"mk{uuid.uuid4().hex}"


async def test_a_terminal_transition_purges_the_unmatched_events_payloads(api: Api, host: Host) -> None:
    # WF-25 (the unmatched event's payload purged at the terminal transition, from the history
    # and from the topics), WF-43 (the matched one, consumed into the wait's result, stays readable)
    flows, tag = await workflow(api), tagged()
    iid = await flows.started(id="one", params={"tag": f"{tag}-PARAMS"})
    await ended(flows, iid, tag)
    items = (await flows.history(iid)).json()["items"]
    events = {x["data"]["type"]: x["data"] for x in items if x["type"] == "EventAccepted"}
    assert "payload" not in events["other"], events
    assert events["go"]["payload"] == {"m": f"{tag}-MATCHED"}
    got = (await flows.get(iid)).json()["output"]
    assert got == {"out": f"{tag}-OUTPUT", "noted": {"note": f"{tag}-STEP"}, "got": {"m": f"{tag}-MATCHED"}}

    m = markers(tag)
    retained = [m[what] for what in ("params", "step result", "output", "matched event")]
    topics = await until_gone(host, [m["unmatched event"], *retained], Topics.plain)
    assert topics.readable(m["unmatched event"]) == []
    # Retained data is sealed, not lost: every other document opens with its instance's keys.
    for mark in retained:
        assert topics.opened(mark), mark
    await settled_replay(host)


async def test_a_workflow_delete_leaves_nothing_readable_on_the_topics(api: Api, host: Host) -> None:
    # WF-13 (every instance's params, step results, event payloads, outputs and error messages
    # purged by the delete, from every topic of the Host), WF-15 (the same name: a new UID)
    flows = await workflow(api)
    tags = {"done": tagged(), "waiting": tagged(), "failed": tagged()}
    for iid, tag in tags.items():
        mode = "throw" if iid == "failed" else "wait"
        await flows.started(id=iid, params={"tag": f"{tag}-PARAMS", "mode": mode})
    await ended(flows, "done", tags["done"])
    await flows.until("waiting", "waiting")
    unmatched = {"type": "other", "payload": {"m": f"{tags['waiting']}-UNMATCHED"}}
    assert (await flows.event("waiting", unmatched)).status_code == 202
    failed = await flows.until("failed", "errored")
    assert tags["failed"] in failed["error"]["message"]
    before = await read_topics(host.settings)
    assert before.opened(f"{tags['waiting']}-UNMATCHED"), "the live instance's event is sealed, not lost"
    assert before.opened(f"{tags['failed']}-ERROR")

    await api.done(await api.delete(flows.uid))
    for iid in tags:
        assert_problem(await flows.get(iid), 404, "not_found")
    everything = [mark for tag in tags.values() for mark in markers(tag).values()]
    await until_unreadable(host, *everything)
    await settled_replay(host)


@pytest.fixture(scope="module")
def retention_host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    """A Host whose terminal instances are purged 2 s after their terminal transition."""
    settings = new_settings(
        kafka_bootstrap, database_url, workflow_retention_seconds=2, nonconformant_test_settings=True
    )
    with running_host(settings) as h:
        yield h


@pytest.fixture
async def retention_api(retention_host: Host) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=retention_host.url, timeout=60) as client:
        yield Api(client, await new_space(retention_host))


async def test_the_retention_purge_leaves_nothing_readable(retention_api: Api, retention_host: Host) -> None:
    # WF-47 (after the retention period the terminal instance's history is discarded, from the
    # topics too), WF-20 (then unknown_instance)
    flows, tag = await workflow(retention_api), tagged()
    iid = await flows.started(id="kept-briefly", params={"tag": f"{tag}-PARAMS"})
    await ended(flows, iid, tag)
    deadline = time.monotonic() + 30
    while (resp := await flows.get(iid)).status_code != 404:
        assert time.monotonic() < deadline, resp.json()
        await asyncio.sleep(0.2)
    assert_problem(resp, 404, "unknown_instance")
    await until_unreadable(retention_host, *markers(tag).values())
    await settled_replay(retention_host)
