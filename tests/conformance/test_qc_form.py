"""QueueConsumer 0.3.0 as a Host API v2 Resource: input, references, validation, CRUD."""

import uuid
from typing import Any

import pytest

from tests.conformance.kit import Api
from tests.httpkit import CONSUMER, QUEUE, assert_problem, auth
from tests.spec_ranges import CONSUMER_RANGES

pytestmark = pytest.mark.integration


@pytest.fixture
async def world(api: Api) -> dict[str, str]:
    return {
        "q": await api.queue(),
        "q2": await api.queue(),
        "q3": await api.queue(),
        "w": await api.worker(deploy=False),
        "nh": await api.worker(handlers=(), deploy=False),
    }


async def rejected(api: Api, spec: Any, status: int, code: str, **extra: Any) -> dict[str, Any]:
    name = f"c-{uuid.uuid4().hex[:8]}"
    body = assert_problem(await api.post(name, CONSUMER, spec, **extra), status, code)
    # QC-20, QC-38: nothing was created, not even for a moment
    r = await api.c.get(f"/v2/spaces/{api.space}/resources", params={"name": name}, headers=api.h)
    assert r.json()["items"] == []
    return body


async def test_spec_is_closed_and_complete(api: Api, world: dict[str, str]) -> None:
    # QC-1, QC-10, QC-11, QC-53
    base = api.consumer_spec(world["q"], world["w"])
    body = await rejected(api, {**base, "extra": True}, 400, "invalid_spec")
    assert body["errors"][0]["path"] == "/spec/extra"
    for field in (
        "queue",
        "worker",
        "maxBatchSize",
        "maxBatchTimeoutSeconds",
        "maxConcurrency",
        "maxRetries",
        "retryDelaySeconds",
    ):
        spec = dict(base)
        del spec[field]
        body = await rejected(api, spec, 400, "invalid_spec")  # no defaults (QC-10)
        assert body["errors"][0]["path"] == f"/spec/{field}"
    for ref in ({"resourceUid": world["q"], "name": "x"}, {}, world["q"]):
        await rejected(api, {**base, "queue": ref}, 400, "invalid_spec")
        await rejected(api, {**base, "deadLetterQueue": ref}, 400, "invalid_spec")
    await rejected(api, base, 400, "invalid_spec", privateInputs={"token": "x"})


@pytest.mark.parametrize("field, low, high", CONSUMER_RANGES)  # QC-4..8
async def test_ranges(api: Api, world: dict[str, str], field: str, low: int, high: int) -> None:
    base = api.consumer_spec(world["q"], world["w"])
    for bad in (low - 1, high + 1, 1.5, "1", None):
        body = await rejected(api, {**base, field: bad}, 400, "invalid_spec")
        assert body["errors"][0]["path"] == f"/spec/{field}"
    c = await api.create(f"c-{uuid.uuid4().hex[:8]}", CONSUMER, {**base, field: low})
    await api.done(await api.put(c, {**base, field: high}))  # updatable (QC-4..8)


async def test_reference_checks(api: Api, world: dict[str, str], client: Any, host: Any) -> None:
    # QC-13, QC-14, QC-18: pinned to UIDs, same Space, exact Form, exists, not deleting
    base = api.consumer_spec(world["q"], world["w"])
    name = (await api.get(world["q"])).json()["name"]
    await rejected(api, {**base, "queue": {"resourceUid": name}}, 409, "dependency_conflict")
    await rejected(api, {**base, "queue": {"resourceUid": "res_missing"}}, 409, "dependency_conflict")
    await rejected(api, {**base, "queue": {"resourceUid": world["w"]}}, 409, "dependency_conflict")
    await rejected(api, {**base, "worker": {"resourceUid": world["q"]}}, 409, "dependency_conflict")
    await rejected(api, {**base, "deadLetterQueue": {"resourceUid": world["w"]}}, 409, "dependency_conflict")
    other = await other_space_queue(client, host)
    body = await rejected(api, {**base, "queue": {"resourceUid": other}}, 409, "dependency_conflict")
    assert "not found" in body["detail"]
    await rejected(api, {**base, "deadLetterQueue": {"resourceUid": other}}, 409, "dependency_conflict")


async def other_space_queue(client: Any, host: Any) -> str:
    admin = auth(host.admin_token)
    name = "sp-" + uuid.uuid4().hex[:10]
    assert (await client.post("/v2/spaces", json={"name": name}, headers=admin)).status_code == 201
    r = await client.post(
        f"/v2/spaces/{name}/resources",
        headers={**admin, "Idempotency-Key": "k"},
        json={"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}},
    )
    assert r.status_code == 202, r.text
    return r.json()["resourceUid"]  # type: ignore[no-any-return]


async def test_reference_grants_no_authority(api: Api, world: dict[str, str]) -> None:
    # QC-15: the caller must be allowed to use every referenced Resource
    r = await api.c.post(
        f"/v2/spaces/{api.space}/resources",
        headers={**auth(api.viewer), "Idempotency-Key": "k"},
        json={"name": "c", "form": CONSUMER, "spec": api.consumer_spec(world["q"], world["w"])},
    )
    assert_problem(r, 403, "forbidden")


async def test_worker_must_provide_queue_handler(api: Api, world: dict[str, str]) -> None:
    # QC-16, QC-3
    body = await rejected(api, api.consumer_spec(world["q"], world["nh"]), 409, "dependency_conflict")
    assert "queue handler" in body["detail"]


async def test_one_consumer_per_queue(api: Api, world: dict[str, str]) -> None:
    # QC-17
    await api.consumer(world["q"], world["w"])
    await rejected(api, api.consumer_spec(world["q"], world["w"]), 409, "dependency_conflict")


async def test_dead_letter_cycles_rejected(api: Api, world: dict[str, str]) -> None:
    # QC-19, QC-9, QC-20
    q, q2, q3, w = world["q"], world["q2"], world["q3"], world["w"]
    await rejected(api, api.consumer_spec(q, w, deadLetterQueue={"resourceUid": q}), 409, "dependency_conflict")
    await api.consumer(q, w, deadLetterQueue={"resourceUid": q2})
    await api.consumer(q2, w, deadLetterQueue={"resourceUid": q3})
    body = await rejected(api, api.consumer_spec(q3, w, deadLetterQueue={"resourceUid": q}), 409, "dependency_conflict")
    assert "cycle" in body["detail"]
    c3 = await api.consumer(q3, w)
    before = (await api.get(c3)).json()
    r = await api.put(c3, api.consumer_spec(q3, w, deadLetterQueue={"resourceUid": q}))
    assert_problem(r, 409, "dependency_conflict")
    after = (await api.get(c3)).json()
    assert after["spec"] == before["spec"] and after["generation"] == before["generation"]


async def test_queue_and_worker_immutable(api: Api, world: dict[str, str]) -> None:
    # QC-2, QC-3, QC-12, QC-40
    q, q2, w = world["q"], world["q2"], world["w"]
    w2 = await api.worker(deploy=False)
    c = await api.consumer(q, w, name="attach")
    for spec, path in [(api.consumer_spec(q2, w), "/spec/queue"), (api.consumer_spec(q, w2), "/spec/worker")]:
        body = assert_problem(await api.put(c, spec), 400, "invalid_spec")
        assert body["errors"][0]["path"] == path
    # other settings change; the DLQ may be set and removed again (QC-9)
    await api.done(await api.put(c, api.consumer_spec(q, w, maxBatchSize=5, deadLetterQueue={"resourceUid": q2})))
    await api.done(await api.put(c, api.consumer_spec(q, w)))
    res = (await api.get(c)).json()
    assert res["generation"] == 3 and "deadLetterQueue" not in res["spec"]
    # to change queue or worker: delete, then create again under the released name (QC-12)
    await api.done(await api.delete(c))
    c2 = await api.consumer(q2, w2, name="attach")
    assert c2 != c


async def test_observed_and_output(api: Api, world: dict[str, str]) -> None:
    # QC-35, QC-36, QC-37, QC-39
    c = await api.consumer(world["q"], world["w"])  # no Deployment: the handler cannot even run
    res = (await api.get(c)).json()
    assert res["output"] == {} and res["observed"] in (
        {},
        {"queueExists": True, "workerExists": True, "consumerAttached": True},
    )
    import asyncio

    for _ in range(100):
        res = (await api.get(c)).json()
        if res["observed"]:
            break
        await asyncio.sleep(0.1)
    assert res["observed"] == {"queueExists": True, "workerExists": True, "consumerAttached": True}
    assert res["output"] == {}
    # a read never starts delivery: with no usable Version nothing leaves the queue (QC-39)
    await api.send(world["q"], "a")
    for _ in range(5):
        await api.get(c)
    await asyncio.sleep(1)
    s = await api.stats(world["q"])
    assert s["ready"] == 1 and s["inFlight"] == 0


async def test_idempotent_create_update_delete(api: Api, world: dict[str, str]) -> None:
    # QC-46, QC-48: the same key is the same Operation, never a second Consumer
    spec = api.consumer_spec(world["q"], world["w"])
    first = await api.post("same", CONSUMER, spec, key="k-create")
    again = await api.post("same", CONSUMER, spec, key="k-create")
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    c = (await api.done(first))["resourceUid"]
    u1 = await api.put(c, {**spec, "maxRetries": 1}, key="k-update")
    u2 = await api.put(c, {**spec, "maxRetries": 1}, key="k-update")
    assert u1.json()["id"] == u2.json()["id"]
    await api.done(u1)
    d1 = await api.delete(c, key="k-delete")
    d2 = await api.delete(c, key="k-delete")
    assert d1.json()["id"] == d2.json()["id"]
    op = await api.done(d1)
    assert op["effect"] == "complete"  # QC-47: a succeeded Operation's effect is complete
    r = await api.c.get(f"/v2/spaces/{api.space}/resources", params={"form": CONSUMER}, headers=api.h)
    assert r.json()["items"] == []


async def test_delete_never_cascades(api: Api, world: dict[str, str]) -> None:
    # QC-41, QC-50, QC-51
    q, dlq, w = world["q"], world["q2"], world["w"]
    c = await api.consumer(q, w, deadLetterQueue={"resourceUid": dlq})
    await api.send(q, "pending")
    for uid in (q, dlq):
        assert_problem(await api.delete(uid), 409, "dependency_conflict")  # QC-51
    assert_problem(await api.delete(w), 409, "dependency_conflict")
    await api.done(await api.delete(c))
    for uid in (q, dlq, w):
        assert (await api.get(uid)).status_code == 200
    s = await api.stats(q)
    assert s["ready"] == 1 and s["acknowledged"] == 0  # pending messages stay where they are
    assert (await api.stats(dlq))["ready"] == 0
    await api.done(await api.delete(q))  # now nothing references it
