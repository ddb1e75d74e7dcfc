"""A crash of the control processor loses nothing and duplicates nothing (QC-43, QC-46, QC-48, WF-16)."""

import asyncio
import uuid
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from sumi.core import records as r
from tests.hostkit import Host, control_log, new_settings, running_host

pytestmark = pytest.mark.integration

QUEUE = "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/"


@pytest.fixture(scope="module")
def own_host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    # A Host of its own: killing its processor must not disturb other tests.
    with running_host(new_settings(kafka_bootstrap, database_url, decision_timeout=4.0)) as h:
        yield h


async def _create(client: httpx.AsyncClient, space: str, name: str, key: str) -> httpx.Response:
    return await client.post(
        f"/v2/spaces/{space}/resources",
        headers={"Idempotency-Key": key},
        json={"name": name, "form": QUEUE, "spec": {"retentionSeconds": 600}},
    )


async def test_sigkill_while_operations_are_in_flight(own_host: Host) -> None:
    # QC-48: Operations survive a restart and end definite; QC-46: a retry with the same key is
    # the same Operation; no Resource is created twice.
    admin = {"Authorization": f"Bearer {own_host.admin_token}"}
    space = "crash-" + uuid.uuid4().hex[:6]
    async with httpx.AsyncClient(base_url=own_host.url, headers=admin, timeout=30) as client:
        assert (await client.post("/v2/spaces", json={"name": space})).status_code == 201
        names = [f"q{i}" for i in range(40)]
        keys = {n: uuid.uuid4().hex for n in names}

        async def killer() -> None:
            for _ in range(2):
                await asyncio.sleep(0.3)
                await asyncio.to_thread(own_host.supervisor.kill, "control")

        first, _ = await asyncio.gather(asyncio.gather(*(_create(client, space, n, keys[n]) for n in names)), killer())
        assert {resp.status_code for resp in first} <= {202, 503}
        # The client did not see some outcomes: it retries with the same key, as the contract says.
        ops: dict[str, str] = {}
        for name, resp in zip(names, first, strict=True):
            for _ in range(10):
                if resp.status_code == 202:
                    break
                resp = await _create(client, space, name, keys[name])
            assert resp.status_code == 202, resp.text
            if name in ops:
                assert ops[name] == resp.json()["id"]
            ops[name] = resp.json()["id"]
        for name, op_id in ops.items():
            again = await _create(client, space, name, keys[name])
            assert again.json()["id"] == op_id  # same key → same Operation, after the crash too
            done = (await client.get(f"/v2/operations/{op_id}", params={"wait": 30})).json()
            assert done["state"] == "succeeded", done
        listed = (await client.get(f"/v2/spaces/{space}/resources")).json()["items"]
        assert sorted(item["name"] for item in listed) == sorted(names)

    log = await control_log(own_host)
    created = Counter(rec.name for rec in log if isinstance(rec, r.ResourceCreated) and rec.space == space)
    assert created == Counter(names)  # exactly one ResourceCreated per name in the log
    started = Counter(rec.resourceUid for rec in log if isinstance(rec, r.OperationStarted) and rec.space == space)
    assert all(count == 1 for count in started.values()) and len(started) == len(names)


async def test_no_decision_in_time_is_503_and_the_retry_gets_the_same_operation(own_host: Host) -> None:
    # Rule 4 / host-api §6: a decision that does not come in time is 503 backend_unavailable,
    # "nothing is known to have happened"; the retry with the same key is the same Operation (QC-46).
    admin = {"Authorization": f"Bearer {own_host.admin_token}"}
    space = "outage-" + uuid.uuid4().hex[:6]
    sup = own_host.supervisor
    async with httpx.AsyncClient(base_url=own_host.url, headers=admin, timeout=30) as client:
        assert (await client.post("/v2/spaces", json={"name": space})).status_code == 201
        await asyncio.to_thread(sup.hold, "control")
        try:
            lost = await _create(client, space, "q", "the-key")
            assert lost.status_code == 503
            assert lost.headers["content-type"].startswith("application/problem+json")
            assert lost.json()["code"] == "backend_unavailable"
        finally:
            sup.release("control")
        for _ in range(20):
            again = await _create(client, space, "q", "the-key")
            if again.status_code == 202:
                break
        assert again.status_code == 202, again.text
        done = (await client.get(f"/v2/operations/{again.json()['id']}", params={"wait": 30})).json()
        assert done["state"] == "succeeded"
        listed = (await client.get(f"/v2/spaces/{space}/resources")).json()["items"]
        assert [item["name"] for item in listed] == ["q"]
