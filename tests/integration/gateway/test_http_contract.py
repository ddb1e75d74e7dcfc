"""The Host API over real HTTP against a real Host (host-api.md, word for word).

Needs the session fixture `host` (Kafka + Postgres + every service) and a fresh
Space per test from `space` (tests/conftest.py).
"""

import asyncio
import base64
import uuid
from typing import Any

import httpx
import pytest

from tests.httpkit import PROBLEM, QUEUE, assert_problem, auth, b64, key

pytestmark = pytest.mark.integration


async def create_queue(
    client: httpx.AsyncClient, space: str, token: str, name: str, retention: int = 3600, wait: bool = True
) -> dict[str, Any]:
    body = {"name": name, "form": QUEUE, "spec": {"retentionSeconds": retention}}
    r = await client.post(f"/v2/spaces/{space}/resources", headers={**auth(token), **key()}, json=body)
    assert r.status_code == 202, r.text
    op = r.json()
    assert r.headers["location"] == f"/v2/operations/{op['id']}"
    return await finish(client, token, op) if wait else op


async def finish(client: httpx.AsyncClient, token: str, op: dict[str, Any]) -> dict[str, Any]:
    r = await client.get(f"/v2/operations/{op['id']}?wait=30", headers=auth(token))
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "succeeded", r.json()
    return r.json()


# ---- section 1: authentication and authorization ---------------------------------------------


async def test_missing_or_unknown_token_is_401(client: httpx.AsyncClient, space: Any) -> None:
    name, _, _ = space
    assert_problem(await client.get("/v2/spaces"), 401, "unauthenticated")
    assert_problem(
        await client.get(f"/v2/spaces/{name}/resources", headers=auth("sumi_not-a-token")), 401, "unauthenticated"
    )
    assert_problem(await client.get("/v2/spaces", headers={"Authorization": "Basic eDp5"}), 401, "unauthenticated")


async def test_viewer_reads_but_cannot_write(client: httpx.AsyncClient, space: Any) -> None:
    name, _, viewer = space
    r = await client.get(f"/v2/spaces/{name}/resources", headers=auth(viewer))
    assert r.status_code == 200
    r = await client.post(
        f"/v2/spaces/{name}/resources",
        headers={**auth(viewer), **key()},
        json={"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}},
    )
    assert_problem(r, 403, "forbidden")


async def test_a_space_without_a_role_is_not_found(client: httpx.AsyncClient, host: Any, space: Any) -> None:
    name, editor, _ = space
    other = "sp-" + uuid.uuid4().hex[:10]
    r = await client.post("/v2/spaces", headers=auth(host.admin_token), json={"name": other})
    assert r.status_code == 201, r.text
    for path in (
        f"/v2/spaces/{other}/resources",
        f"/v2/spaces/{other}/resources/anything",
        f"/v2/spaces/{other}/queues/q/stats",
    ):
        assert_problem(await client.get(path, headers=auth(editor)), 404, "not_found")
        # Same answer as for a Space that does not exist at all: nothing is revealed.
        absent = await client.get(path.replace(other, "sp-does-not-exist"), headers=auth(editor))
        assert_problem(absent, 404, "not_found")
    r = await client.get("/v2/spaces", headers=auth(editor))
    assert [s for s in r.json()["items"] if s["name"] == other] == []
    assert {"name": name, "role": "editor"}.items() <= next(s for s in r.json()["items"] if s["name"] == name).items()


# ---- section 1: Spaces and tokens ------------------------------------------------------------


async def test_space_create_conflict_and_delete(client: httpx.AsyncClient, host: Any, space: Any) -> None:
    admin = auth(host.admin_token)
    name = "sp-" + uuid.uuid4().hex[:10]
    r = await client.post("/v2/spaces", headers=admin, json={"name": name})
    assert r.status_code == 201, r.text
    assert r.json()["name"] == name and r.json()["createdAt"].endswith("Z")
    assert_problem(await client.post("/v2/spaces", headers=admin, json={"name": name}), 409, "name_conflict")
    assert_problem(await client.post("/v2/spaces", headers=admin, json={"name": "Bad_Name"}), 400, "invalid_request")
    assert_problem(await client.post("/v2/spaces", headers=admin, json={"name": "x", "y": 1}), 400, "invalid_request")
    assert_problem(
        await client.post("/v2/spaces", headers=auth(space.editor_token), json={"name": "sp-" + uuid.uuid4().hex[:10]}),
        403,
        "forbidden",
    )
    assert_problem(await client.delete(f"/v2/spaces/{space.name}", headers=auth(space.editor_token)), 403, "forbidden")
    assert_problem(
        await client.delete(f"/v2/spaces/{name}", headers=auth(space.editor_token)), 404, "not_found"
    )  # no role there: not even its existence is revealed
    await create_queue(client, name, host.admin_token, "q1", wait=True)
    assert_problem(await client.delete(f"/v2/spaces/{name}", headers=admin), 409, "dependency_conflict")
    uid = (await client.get(f"/v2/spaces/{name}/resources/q1", headers=admin)).json()["uid"]
    r = await client.delete(f"/v2/spaces/{name}/resources/{uid}", headers={**admin, **key()})
    await finish(client, host.admin_token, r.json())
    r = await client.delete(f"/v2/spaces/{name}", headers=admin)
    assert r.status_code == 204, r.text
    assert_problem(await client.get(f"/v2/spaces/{name}/resources", headers=admin), 404, "not_found")


async def test_token_issue_use_and_immediate_revocation(client: httpx.AsyncClient, host: Any, space: Any) -> None:
    name, _, _ = space
    admin = auth(host.admin_token)
    principal = "p-" + uuid.uuid4().hex[:10]
    r = await client.post(
        "/v2/tokens",
        headers=admin,
        json={"principal": principal, "grants": [{"space": name, "role": "viewer"}], "admin": False},
    )
    assert r.status_code == 201, r.text
    assert r.json()["principal"] == principal
    token = r.json()["token"]
    r = await client.get(f"/v2/spaces/{name}/resources", headers=auth(token))
    assert r.status_code == 200
    # The listing (an addition to the contract, for `sumi token list`): the principal, never its token.
    listed = await client.get("/v2/tokens", headers=admin)
    assert listed.status_code == 200 and token not in listed.text, listed.text
    mine = [p for p in listed.json()["items"] if p["principal"] == principal]
    assert [(p["admin"], p["tokens"], p["grants"]) for p in mine] == [(False, 1, [{"space": name, "role": "viewer"}])]
    assert_problem(await client.get("/v2/tokens", headers=auth(token)), 403, "forbidden")
    r = await client.delete(f"/v2/tokens/{principal}", headers=admin)
    assert r.status_code == 204, r.text
    assert_problem(await client.get(f"/v2/spaces/{name}/resources", headers=auth(token)), 401, "unauthenticated")
    listed = await client.get("/v2/tokens", headers=admin)
    assert principal not in [p["principal"] for p in listed.json()["items"]]


async def test_token_grants_are_validated(client: httpx.AsyncClient, host: Any, space: Any) -> None:
    admin = auth(host.admin_token)
    for body in (
        {"principal": "p1", "grants": [{"space": "sp-nowhere", "role": "editor"}]},
        {"principal": "p1", "grants": [{"space": space.name, "role": "owner"}]},
        {"principal": "p1", "grants": [{"space": space.name}]},
        {"principal": "P 1"},
        {"principal": "p1", "admin": "yes"},
        {"principal": "p1", "extra": 1},
    ):
        assert_problem(await client.post("/v2/tokens", headers=admin, json=body), 400, "invalid_request")
    assert_problem(
        await client.post("/v2/tokens", headers=auth(space.editor_token), json={"principal": "p1"}), 403, "forbidden"
    )


# ---- section 2 and 3: Resources and Operations -----------------------------------------------


async def test_queue_create_get_list_update_delete(client: httpx.AsyncClient, space: Any) -> None:
    name, editor, viewer = space
    base = f"/v2/spaces/{name}/resources"
    op = await create_queue(client, name, editor, "orders", wait=False)
    assert op["kind"] == "create" and op["space"] == name and op["generation"] == 1
    assert op["state"] in ("pending", "running", "succeeded") and "error" not in op
    done = await finish(client, editor, op)
    assert done["effect"] == "complete"
    uid = op["resourceUid"]
    assert "_" in uid
    for ref in (uid, "orders"):  # by UID or by name
        r = await client.get(f"{base}/{ref}", headers=auth(viewer))
        assert r.status_code == 200, r.text
        res = r.json()
        assert set(res) == {
            "uid",
            "space",
            "name",
            "form",
            "generation",
            "state",
            "spec",
            "observed",
            "output",
            "createdAt",
            "updatedAt",
        }
        assert (res["uid"], res["name"], res["form"], res["state"], res["generation"]) == (
            uid,
            "orders",
            QUEUE,
            "active",
            1,
        )
        assert res["spec"] == {"retentionSeconds": 3600} and res["createdAt"].endswith("Z")
    r = await client.get(f"{base}?form={QUEUE}&name=orders", headers=auth(viewer))
    assert [i["uid"] for i in r.json()["items"]] == [uid] and r.json()["nextCursor"] is None

    r = await client.put(f"{base}/{uid}", headers={**auth(editor), **key()}, json={"spec": {"retentionSeconds": 7200}})
    assert r.status_code == 202, r.text
    assert r.json()["kind"] == "update" and r.json()["generation"] == 2
    await finish(client, editor, r.json())
    res = (await client.get(f"{base}/{uid}", headers=auth(editor))).json()
    assert res["generation"] == 2 and res["spec"] == {"retentionSeconds": 7200}  # read your writes

    r = await client.delete(f"{base}/orders", headers={**auth(editor), **key()})
    assert r.status_code == 202, r.text
    assert r.json()["kind"] == "delete" and r.json()["generation"] == 2
    await finish(client, editor, r.json())
    assert_problem(await client.get(f"{base}/{uid}", headers=auth(editor)), 404, "not_found")
    await create_queue(client, name, editor, "orders")  # the name is free again


async def test_list_pages_by_cursor(client: httpx.AsyncClient, space: Any) -> None:
    name, editor, _ = space
    uids = sorted([(await create_queue(client, name, editor, f"q{i}"))["resourceUid"] for i in range(3)])
    seen, cursor = [], None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"/v2/spaces/{name}/resources", params=params, headers=auth(editor))).json()
        seen += [i["uid"] for i in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == uids
    for bad in ({"limit": "0"}, {"limit": "101"}, {"cursor": "%%%"}):
        r = await client.get(f"/v2/spaces/{name}/resources", params=bad, headers=auth(editor))
        assert_problem(r, 400, "invalid_request")


async def test_idempotency_key_replay_reuse_and_required(client: httpx.AsyncClient, space: Any) -> None:  # QC-46
    name, editor, _ = space
    base = f"/v2/spaces/{name}/resources"
    body = {"name": "idem", "form": QUEUE, "spec": {"retentionSeconds": 60}}
    headers = {**auth(editor), **key()}
    first = await client.post(base, headers=headers, json=body)
    second = await client.post(base, headers=headers, json=body)
    assert first.status_code == second.status_code == 202, second.text
    assert first.json()["id"] == second.json()["id"]
    assert second.headers["location"] == first.headers["location"]
    await finish(client, editor, first.json())
    third = await client.post(base, headers=headers, json=body)  # after success: same Operation
    assert third.status_code == 202 and third.json()["id"] == first.json()["id"]
    assert third.json()["state"] == "succeeded"
    items = (await client.get(f"{base}?name=idem", headers=auth(editor))).json()["items"]
    assert len(items) == 1  # never a second Resource
    assert_problem(
        await client.post(base, headers=headers, json={**body, "name": "other"}), 422, "idempotency_key_reused"
    )
    assert_problem(await client.post(base, headers=auth(editor), json=body), 428, "idempotency_key_required")
    assert_problem(
        await client.put(f"{base}/idem", headers=auth(editor), json={"spec": {}}), 428, "idempotency_key_required"
    )
    assert_problem(await client.delete(f"{base}/idem", headers=auth(editor)), 428, "idempotency_key_required")
    assert_problem(
        await client.post(base, headers={**auth(editor), "Idempotency-Key": "a b"}, json=body), 400, "invalid_request"
    )


async def test_rejections_before_side_effects(client: httpx.AsyncClient, space: Any) -> None:
    name, editor, _ = space
    base = f"/v2/spaces/{name}/resources"

    async def post(body: Any) -> httpx.Response:
        return await client.post(base, headers={**auth(editor), **key()}, json=body)

    assert_problem(
        await post({"name": "x", "form": QUEUE.replace("0.2.0", "9.9.9"), "spec": {"retentionSeconds": 60}}),
        400,
        "unsupported_form",
    )
    bad = assert_problem(await post({"name": "x", "form": QUEUE, "spec": {"retentionSeconds": 1}}), 400, "invalid_spec")
    assert "/spec/retentionSeconds" in [e["path"] for e in bad["errors"]]
    bad = assert_problem(
        await post({"name": "x", "form": QUEUE, "spec": {"retentionSeconds": 60, "color": "red"}}), 400, "invalid_spec"
    )  # QC-53: unknown spec fields are rejected
    assert bad["errors"] and all(e["path"].startswith("/spec") for e in bad["errors"])
    assert_problem(
        await post({"name": "x", "form": QUEUE, "spec": {"retentionSeconds": 60}, "privateInputs": {"secret": "s"}}),
        400,
        "invalid_spec",
    )
    assert_problem(await post({"name": "x", "form": QUEUE, "spec": {}, "extra": 1}), 400, "invalid_request")
    assert_problem(await post([1]), 400, "invalid_request")
    r = await client.post(base, headers={**auth(editor), **key(), "Content-Type": "application/json"}, content=b"{nope")
    assert_problem(r, 400, "invalid_request")
    await create_queue(client, name, editor, "taken")
    assert_problem(await post({"name": "taken", "form": QUEUE, "spec": {"retentionSeconds": 60}}), 409, "name_conflict")
    assert_problem(await client.get(f"{base}/res_nothing", headers=auth(editor)), 404, "not_found")
    assert_problem(
        await client.put(f"{base}/nothing", headers={**auth(editor), **key()}, json={"spec": {"retentionSeconds": 60}}),
        404,
        "not_found",
    )
    assert_problem(await client.get("/v2/operations/op_nothing", headers=auth(editor)), 404, "not_found")
    items = (await client.get(base, headers=auth(editor))).json()["items"]
    assert [i["name"] for i in items] == ["taken"]  # nothing else was created


async def test_operations_are_visible_only_in_their_space(client: httpx.AsyncClient, host: Any, space: Any) -> None:
    name, editor, viewer = space
    op = await create_queue(client, name, editor, "mine")
    assert (await client.get(f"/v2/operations/{op['id']}", headers=auth(viewer))).status_code == 200
    principal = "p-" + uuid.uuid4().hex[:10]
    r = await client.post("/v2/tokens", headers=auth(host.admin_token), json={"principal": principal, "grants": []})
    outsider = r.json()["token"]
    assert_problem(await client.get(f"/v2/operations/{op['id']}", headers=auth(outsider)), 404, "not_found")


# ---- section 4: the queue data plane -----------------------------------------------------------


async def test_queue_send_stats_peek(client: httpx.AsyncClient, space: Any) -> None:  # QC-52
    name, editor, viewer = space
    uid = (await create_queue(client, name, editor, "work"))["resourceUid"]
    base = f"/v2/spaces/{name}/queues"
    r = await client.post(
        f"{base}/work/messages",
        headers=auth(editor),
        json={
            "messages": [
                {"body": b64(b"first")},
                {"body": b64(b"\x00\xff binary")},
                {"body": b64(b"later"), "delaySeconds": 3600},
            ]
        },
    )
    assert r.status_code == 202, r.text
    ids = r.json()["messageIds"]
    assert len(ids) == len(set(ids)) == 3

    stats = (await client.get(f"{base}/{uid}/stats", headers=auth(viewer))).json()
    assert {k: stats[k] for k in ("ready", "delayed", "inFlight")} == {"ready": 2, "delayed": 1, "inFlight": 0}
    assert {k: stats[k] for k in ("acknowledged", "retried", "deadLettered", "discarded")} == {
        "acknowledged": 0,
        "retried": 0,
        "deadLettered": 0,
        "discarded": 0,
    }
    assert stats["observedAt"].endswith("Z")

    peek = (await client.get(f"{base}/work/messages?includeBody=true", headers=auth(viewer))).json()["items"]
    assert [i["id"] for i in peek] == ids  # acceptance order
    assert [base64.b64decode(i["body"]) for i in peek] == [b"first", b"\x00\xff binary", b"later"]
    assert [i["state"] for i in peek] == ["ready", "ready", "delayed"]
    assert [i["size"] for i in peek] == [5, 9, 5]
    assert all(i["attempts"] == 1 and isinstance(i["timestamp"], int) for i in peek)
    delayed = (await client.get(f"{base}/work/messages?state=delayed", headers=auth(viewer))).json()["items"]
    assert [i["id"] for i in delayed] == ids[2:] and "body" not in delayed[0]
    limited = (await client.get(f"{base}/work/messages?limit=1", headers=auth(viewer))).json()
    assert [i["id"] for i in limited["items"]] == ids[:1]
    for bad in ("state=done", "limit=0", "limit=1001", "includeBody=yes"):
        assert_problem(await client.get(f"{base}/work/messages?{bad}", headers=auth(viewer)), 400, "invalid_request")
    after = (await client.get(f"{base}/{uid}/stats", headers=auth(viewer))).json()
    assert after["ready"] == 2  # a peek changes nothing


async def test_queue_send_limits_and_errors(client: httpx.AsyncClient, space: Any) -> None:
    name, editor, viewer = space
    await create_queue(client, name, editor, "small")
    url = f"/v2/spaces/{name}/queues/small/messages"
    r = await client.post(url, headers=auth(editor), json={"messages": [{"body": b64(b"x" * 127_000)}]})
    assert r.status_code == 202, r.text
    assert_problem(
        await client.post(url, headers=auth(editor), json={"messages": [{"body": b64(b"x" * 127_001)}]}),
        413,
        "message_too_large",
    )
    for body in (
        {"messages": []},
        {"messages": [{"body": "not base64!"}]},
        {"messages": [{"body": "AA==", "delaySeconds": 43201}]},
        {"messages": [{"body": "AA==", "priority": 1}]},
    ):
        assert_problem(await client.post(url, headers=auth(editor), json=body), 400, "invalid_request")
    assert_problem(
        await client.post(url, headers=auth(viewer), json={"messages": [{"body": "AA=="}]}), 403, "forbidden"
    )
    assert_problem(
        await client.post(
            f"/v2/spaces/{name}/queues/nothing/messages", headers=auth(editor), json={"messages": [{"body": "AA=="}]}
        ),
        404,
        "not_found",
    )
    stats = await client.get(f"/v2/spaces/{name}/queues/small/stats", headers=auth(editor))
    assert stats.json()["ready"] == 1  # only the accepted message


async def test_queue_send_replay_appends_nothing(client: httpx.AsyncClient, space: Any) -> None:  # QC-46, QC-52
    name, editor, _ = space
    await create_queue(client, name, editor, "idem")
    url = f"/v2/spaces/{name}/queues/idem/messages"
    headers = {**auth(editor), **key()}
    body = {"messages": [{"body": b64(b"a")}, {"body": b64(b"b")}]}
    first = await client.post(url, headers=headers, json=body)
    second = await client.post(url, headers=headers, json=body)
    assert first.status_code == second.status_code == 202, second.text
    assert first.json() == second.json()
    stats = (await client.get(f"/v2/spaces/{name}/queues/idem/stats", headers=auth(editor))).json()
    assert stats["ready"] == 2
    fresh = await client.post(url, headers=auth(editor), json=body)  # no key: new messages
    assert set(fresh.json()["messageIds"]).isdisjoint(first.json()["messageIds"])


async def test_a_non_queue_resource_has_no_queue_plane(client: httpx.AsyncClient, space: Any) -> None:
    name, editor, _ = space
    worker = "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/"
    r = await client.post(
        f"/v2/spaces/{name}/resources",
        headers={**auth(editor), **key()},
        json={"name": "w", "form": worker, "spec": {"runtime": "python", "handlers": []}},
    )
    assert r.status_code == 202, r.text
    await finish(client, editor, r.json())
    assert_problem(await client.get(f"/v2/spaces/{name}/queues/w/stats", headers=auth(editor)), 404, "not_found")


# ---- sections 6 and 7: problems for everything, service endpoints ------------------------------


async def test_unknown_route_and_wrong_method_are_problems(client: httpx.AsyncClient, space: Any) -> None:
    assert_problem(await client.get("/v2/nothing", headers=auth(space.editor_token)), 404, "not_found")
    r = await client.patch(f"/v2/spaces/{space.name}/resources", headers=auth(space.editor_token))
    assert r.status_code == 405 and r.headers["content-type"].startswith(PROBLEM)
    assert {"GET", "POST"} <= {m.strip() for m in r.headers["allow"].split(",")}


async def test_service_endpoints(client: httpx.AsyncClient, host: Any) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    # Ready once the projections are caught up: an earlier test's backlog may take a moment.
    deadline = asyncio.get_running_loop().time() + 60
    while (ready := await client.get("/readyz")).status_code != 200 and asyncio.get_running_loop().time() < deadline:
        assert ready.status_code == 503, ready.text
        await asyncio.sleep(0.5)
    assert ready.status_code == 200, ready.text
    doc = (await client.get("/openapi.json")).json()
    assert doc["openapi"].startswith("3.1") and "/v2/spaces" in doc["paths"]
    assert_problem(await client.get("/metrics"), 401, "unauthenticated")
    r = await client.get("/metrics", headers=auth(host.admin_token))
    assert r.status_code == 200 and "sumi_http_requests_total" in r.text
    r = await client.get("/ui/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
