"""Workflow commands answered from the instance log, and reads that see them (issue 43).

The gateway learns a workflow command's decision from the engine's `CommandDecided` on the
instance log (sumi.gateway._logdecisions), not from the projection's `decisions` row: with the
projections held down, creates and events are still answered. A read of the instance after
such an answer waits for the projection to have applied it (sumi.gateway._positions): through
the same gateway by what it remembers, through any gateway by the `Sumi-Position` header.
"""

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

from sumi.core import records as r
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, committed_log, new_settings, new_space, running_host
from tests.httpkit import WORKFLOW, assert_problem

pytestmark = pytest.mark.integration

FLOW = """
export class Flow { async run(event, step) { return await step.do("one", async () => ({ ok: true })); } }
"""


@pytest.fixture(scope="module")
def own_host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    # A Host of its own: its projections and gateway are held and killed here.
    with running_host(new_settings(kafka_bootstrap, database_url, decision_timeout=20.0)) as h:
        yield h


@pytest.fixture
async def flows(own_host: Host) -> AsyncIterator[Flows]:
    space = await new_space(own_host)
    async with httpx.AsyncClient(base_url=own_host.url, timeout=60) as client:
        api = Api(client, space)
        worker = await api.worker(source=FLOW, handlers=())
        uid = await api.create(
            f"wf-{uuid.uuid4().hex[:6]}", WORKFLOW, {"worker": {"resourceUid": worker}, "className": "Flow"}
        )
        yield Flows(api, uid)


async def _projections_held(host: Host) -> None:
    await asyncio.to_thread(host.supervisor.hold, "projections")


async def _until(call: Callable[[], Awaitable[httpx.Response]], timeout: float = 60) -> httpx.Response:
    """The first answer that is not a 503 (nor a gateway still restarting)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            resp = await call()
            if resp.status_code != 503:
                return resp
            assert resp.headers["retry-after"], resp.headers
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError("no answer but 503")


async def _instances_created(host: Host, iid: str) -> list[Any]:
    log = await committed_log(host, "workflow")
    return [x for x in log if isinstance(x, r.InstanceCreated) and x.instanceId == iid]


async def test_writes_are_answered_while_the_projections_are_down(own_host: Host, flows: Flows) -> None:
    # WF-18, WF-23: create and sendEvent answer with the engine's decision; no read model is needed.
    # WF-19: a retry with the key, decided before, answers the first decision once it is readable.
    await _projections_held(own_host)
    try:
        created = await flows.create({"params": {"n": 1}}, key="held-create", timeout=15)
        assert created.status_code == 201, created.text
        iid = created.json()["id"]
        assert created.json() == {"id": iid, "status": "queued"}
        partition, offset = created.headers["sumi-position"].split("-")
        assert int(partition) < own_host.settings.partitions and int(offset) >= 0
        sent = await flows.event(iid, {"type": "go"}, key="held-event")
        assert sent.status_code == 202 and sent.json() == {"sequence": 1}, sent.text
        assert (await flows.create({"id": iid}, timeout=15)).status_code == 409  # instance_exists, from the log
        # The read waits for the projection, bounded, then says so: never that the instance is unknown.
        started = time.monotonic()
        got = await flows.get(iid)
        assert_problem(got, 503, "backend_unavailable")
        assert got.headers["retry-after"]
        assert 1.5 < time.monotonic() - started < 10
        # The engine decides a command ID once: a retry of an answered create waits for its row.
        retry = asyncio.create_task(flows.create({"params": {"n": 1}}, key="held-create", timeout=60))
        await asyncio.sleep(1.0)
        assert not retry.done()
    finally:
        own_host.supervisor.release("projections")
    again = await retry
    assert again.status_code == 201 and again.json()["id"] == iid, again.text
    assert (await _until(lambda: flows.get(iid))).status_code == 200
    assert len(await _instances_created(own_host, iid)) == 1


async def test_a_read_after_a_create_sees_the_instance(own_host: Host, flows: Flows) -> None:
    # WF-18, WF-20: a get right after the create's 201 never says unknown_instance.
    for _ in range(20):
        iid = await flows.started()
        got = await flows.get(iid)
        assert got.status_code == 200, got.text
        assert got.json()["id"] == iid
    listed = (await flows.api.c.get(flows.base, headers=flows.api.h)).json()["items"]
    assert iid in [item["id"] for item in listed]
    history = await flows.history(iid)
    assert history.status_code == 200 and history.json()["items"][0]["type"] == "InstanceCreated", history.text


async def test_any_gateway_reads_a_write_with_its_position(own_host: Host, flows: Flows) -> None:
    # WF-20: the position the answer gave makes a gateway that did not answer it wait as well.
    await _projections_held(own_host)
    try:
        created = await flows.create({}, timeout=15)
        assert created.status_code == 201, created.text
        iid, position = created.json()["id"], created.headers["sumi-position"]
        await asyncio.to_thread(own_host.supervisor.kill, "gateway")  # its successor remembers nothing
        assert_problem(await _until(lambda: flows.get(iid)), 404, "unknown_instance")  # without the header
        with_position = {**flows.api.h, "Sumi-Position": position}
        assert (await flows.api.c.get(flows.path(iid), headers=with_position)).status_code == 503
    finally:
        own_host.supervisor.release("projections")
    got = await _until(lambda: flows.api.c.get(flows.path(iid), headers=with_position))
    assert got.status_code == 200 and got.json()["id"] == iid, got.text
    bad = await flows.api.c.get(flows.path(iid), headers={**flows.api.h, "Sumi-Position": "x-1"})
    assert_problem(bad, 400, "invalid_request")
    # A place the log has not reached was never an answer's: refused at once, not a 503 to retry.
    partition, offset = position.split("-")
    past = {**flows.api.h, "Sumi-Position": f"{partition}-{int(offset) + 1_000_000}"}
    began = time.monotonic()
    assert_problem(await flows.api.c.get(flows.path(iid), headers=past), 400, "invalid_request")
    assert time.monotonic() - began < 1.5


async def test_a_create_retried_after_a_gateway_restart_gets_the_first_decision(own_host: Host, flows: Flows) -> None:
    # WF-19: the same Idempotency-Key, through a gateway that never saw the first try: the same instance.
    key = f"restart-{uuid.uuid4().hex[:8]}"
    first = await flows.create({"params": {"n": 2}}, key=key)
    assert first.status_code == 201, first.text
    await asyncio.to_thread(own_host.supervisor.kill, "gateway")
    again = await _until(lambda: flows.create({"params": {"n": 2}}, key=key))
    assert again.status_code == 201 and again.json() == first.json(), again.text
    assert len(await _instances_created(own_host, first.json()["id"])) == 1
