"""A workflow write with an Idempotency-Key reads the `decisions` table once (issue 41).

An earlier try of the same key may have been decided already: its decision is read after the
request listens for its own and before the command is appended. That one read also tells a key
used with another request; a second read of the same table, for the same command, was a round
trip to Postgres on every keyed write, which past capacity is a wait for a core. Counted on a
gateway of the test's own (the session Host's settings, so the Host's engine decides), not timed.
"""

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sumi.gateway import create_app
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, SpaceFixture
from tests.httpkit import WORKFLOW, assert_problem

pytestmark = pytest.mark.integration

FLOW = """
export class Flow { async run(event, step) { return await step.do("one", async () => ({ ok: true })); } }
"""


class Counted:
    """A gateway in this process whose reads of `decisions` are counted."""

    def __init__(self, host: Host) -> None:
        self.app = create_app(host.settings)
        self.reads = 0

    async def __aenter__(self) -> httpx.AsyncClient:
        self._life = self.app.router.lifespan_context(self.app)
        await self._life.__aenter__()
        db = self.app.state.backend
        fetchall = db.fetchall

        async def counted(sql: str, params: Any = ()) -> Any:
            self.reads += "FROM decisions" in sql
            return await fetchall(sql, params)

        db.fetchall = counted
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://gw", timeout=60)
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()
        await self._life.__aexit__(*exc)


@pytest.fixture
async def uid(host: Host, space: SpaceFixture) -> AsyncIterator[str]:
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as client:
        api = Api(client, space)
        worker = await api.worker(source=FLOW, handlers=())
        yield await api.create(
            f"wf-{uuid.uuid4().hex[:6]}", WORKFLOW, {"worker": {"resourceUid": worker}, "className": "Flow"}
        )


async def test_a_keyed_create_reads_the_decisions_once(host: Host, space: SpaceFixture, uid: str) -> None:
    # WF-19: a retry with the key gets the first decision; WF-27: past capacity a write costs
    # the Host as little as it can (one read of the decisions per keyed write, not two).
    gateway = Counted(host)
    async with gateway as client:
        flows = Flows(Api(client, space), uid)
        first = await flows.create({"id": "a"}, key="k-a")
        assert first.status_code == 201, first.text
        assert gateway.reads == 1
        again = await flows.create({"id": "a"}, key="k-a")
        assert again.status_code == 201 and again.json()["id"] == "a"
        assert gateway.reads == 2
        assert_problem(await flows.create({"id": "b"}, key="k-a"), 422, "idempotency_key_reused")
        assert gateway.reads == 3
