"""The rows the gateway keeps between requests (who a token is, which queue or Workflow a path
names) change the moment their read model does: what a request is allowed, and what it
reaches, is what the Host holds now, never a row kept from before."""

import uuid

import httpx
import pytest

from tests.conformance.kit import Api
from tests.hostkit import Host, SpaceFixture
from tests.httpkit import assert_problem, auth, b64, key

pytestmark = pytest.mark.integration


async def test_a_revoked_token_is_refused_on_the_very_next_request(
    client: httpx.AsyncClient, host: Host, space: SpaceFixture
) -> None:
    # QC-15: a token's authority ends with its revocation, however often it was just used
    admin = auth(host.admin_token)
    principal = f"kept-{uuid.uuid4().hex[:8]}"
    issued = await client.post(
        "/v2/tokens",
        headers=admin,
        json={"principal": principal, "grants": [{"space": space.name, "role": "editor"}], "admin": False},
    )
    assert issued.status_code == 201, issued.text
    mine = auth(issued.json()["token"])
    for _ in range(3):
        assert (await client.get(f"/v2/spaces/{space.name}/resources", headers=mine)).status_code == 200
    assert (await client.delete(f"/v2/tokens/{principal}", headers=admin)).status_code == 204
    assert_problem(await client.get(f"/v2/spaces/{space.name}/resources", headers=mine), 401, "unauthenticated")


async def test_a_grant_changed_to_viewer_stops_writes_at_once(
    client: httpx.AsyncClient, host: Host, space: SpaceFixture
) -> None:
    # QC-15: the caller's role in the Space is the role it holds now
    admin = auth(host.admin_token)
    principal = f"demoted-{uuid.uuid4().hex[:8]}"

    async def issue(role: str) -> dict[str, str]:
        r = await client.post(
            "/v2/tokens",
            headers=admin,
            json={"principal": principal, "grants": [{"space": space.name, "role": role}], "admin": False},
        )
        assert r.status_code == 201, r.text
        return auth(r.json()["token"])

    editor = await issue("editor")
    queue = await Api(client, space).queue()
    send = f"/v2/spaces/{space.name}/queues/{queue}/messages"
    body = {"messages": [{"body": b64("hi")}]}
    assert (await client.post(send, headers=editor, json=body)).status_code == 202
    await issue("viewer")  # a principal's grants are those of its latest token
    assert_problem(await client.post(send, headers=editor, json=body), 403, "forbidden")


async def test_a_deleted_queue_takes_no_more_sends(client: httpx.AsyncClient, space: SpaceFixture) -> None:
    # QC-18: a send to a queue being deleted or gone is refused, however often it was just sent to
    api = Api(client, space)
    queue = await api.queue()
    send = f"/v2/spaces/{space.name}/queues/{queue}/messages"
    body = {"messages": [{"body": b64("hi")}]}
    for _ in range(3):
        assert (await client.post(send, headers={**api.h, **key()}, json=body)).status_code == 202
    await api.done(await api.delete(queue))
    assert_problem(await client.post(send, headers={**api.h, **key()}, json=body), 404, "not_found")
