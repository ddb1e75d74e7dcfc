"""Kafka is the truth: dropping every read model and replaying the topics gives the same rows."""

import asyncio
import base64
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from sumi.host.audit import replay_and_compare
from sumi_projections import drop, migrate
from tests.hostkit import Host, new_settings, running_host

pytestmark = pytest.mark.integration

QUEUE = "https://edge.forms.takoform.com/forms/AtLeastOnceQueue/0.2.0/"


@pytest.fixture(scope="module")
def own_host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    with running_host(new_settings(kafka_bootstrap, database_url)) as h:
        yield h


def _snapshot(host: Host) -> dict[str, list[tuple[Any, ...]]]:
    schema = host.settings.db_schema
    with psycopg.connect(host.settings.database_url) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
            )
            if t not in ("schema_version", "projection_offsets", "projection_status", "prune_marks")
        ]
        return {t: sorted(conn.execute(f'SELECT * FROM "{schema}"."{t}"').fetchall(), key=repr) for t in tables}


async def _activity(host: Host) -> None:
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    space = "rp-" + uuid.uuid4().hex[:6]
    async with httpx.AsyncClient(base_url=host.url, headers=admin, timeout=30) as c:
        assert (await c.post("/v2/spaces", json={"name": space})).status_code == 201
        assert (
            await c.post(
                "/v2/tokens",
                json={"principal": "ed-" + space, "admin": False, "grants": [{"space": space, "role": "editor"}]},
            )
        ).status_code == 201
        ops = []
        for i in range(5):
            resp = await c.post(
                f"/v2/spaces/{space}/resources",
                headers={"Idempotency-Key": f"k{i}"},
                json={"name": f"q{i}", "form": QUEUE, "spec": {"retentionSeconds": 600}},
            )
            ops.append(resp.json()["id"])
        for op in ops:
            assert (await c.get(f"/v2/operations/{op}", params={"wait": 30})).json()["state"] == "succeeded"
        resp = await c.put(
            f"/v2/spaces/{space}/resources/q1",
            headers={"Idempotency-Key": "u1"},
            json={"spec": {"retentionSeconds": 60}},
        )
        await c.get(f"/v2/operations/{resp.json()['id']}", params={"wait": 30})
        resp = await c.delete(f"/v2/spaces/{space}/resources/q2", headers={"Idempotency-Key": "d1"})
        await c.get(f"/v2/operations/{resp.json()['id']}", params={"wait": 30})
        body = base64.b64encode(b"payload").decode()
        assert (
            await c.post(f"/v2/spaces/{space}/queues/q0/messages", json={"messages": [{"body": body}] * 3})
        ).status_code == 202
        bad = await c.post(
            f"/v2/spaces/{space}/resources",
            headers={"Idempotency-Key": "bad"},
            json={"name": "q0", "form": QUEUE, "spec": {"retentionSeconds": 600}},
        )
        assert bad.status_code == 409


async def test_drop_and_rebuild_read_models_gives_the_same_rows(own_host: Host) -> None:
    await _activity(own_host)
    before = _snapshot(own_host)
    assert before["resources"] and before["decisions"] and before["queue_messages"]
    sup = own_host.supervisor
    sup.kill("projections")  # the supervisor restarts it...
    await asyncio.to_thread(drop, own_host.settings.database_url, own_host.settings.db_schema)
    await asyncio.to_thread(migrate, own_host.settings.database_url, own_host.settings.db_schema)
    for _ in range(300):  # ...and it replays every topic from the beginning
        await asyncio.sleep(0.1)
        try:
            after = _snapshot(own_host)
        except psycopg.Error:
            continue
        if after == before:
            break
    assert after == before


async def test_sumi_replay_audit_finds_no_difference(own_host: Host) -> None:
    await _activity(own_host)
    await asyncio.sleep(0.5)
    audit = await replay_and_compare(own_host.settings, timeout=60)
    assert audit.differences == []
    assert audit.quarantined == []
