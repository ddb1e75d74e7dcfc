"""Isolation (issue 20 item 3): every route of the OpenAPI document, tried by everyone who must not
pass: no token and a revoked token (401), a token of another Space (404, revealing nothing), a
viewer (403 on writes) and a non-admin (403 on the admin routes). Each answer a Problem of
host-api.md §6. The routes come from the document itself, so a new route is tried without
anyone adding it here.
"""

import asyncio
import re
import uuid
from dataclasses import dataclass

import httpx
import pytest

from sumi.gateway.openapi import document
from sumi.wire import kafka
from tests.hostkit import Host, SpaceFixture, new_space
from tests.httpkit import QUEUE, assert_problem, auth, key

pytestmark = pytest.mark.integration

WRITES = {"post", "put", "delete"}
ADMIN_ONLY = {
    ("post", "/v2/spaces"),
    ("post", "/v2/tokens"),
    ("get", "/v2/tokens"),
    ("delete", "/v2/tokens/{principal}"),
}


@dataclass(frozen=True)
class Route:
    method: str
    template: str

    @property
    def public(self) -> bool:
        return document()["paths"][self.template][self.method].get("security") == []

    @property
    def in_space(self) -> bool:
        return "{space}" in self.template or self.template == "/v2/operations/{id}"


def routes() -> list[Route]:
    return [Route(m, p) for p, ops in document()["paths"].items() for m in ops if m in {"get", *WRITES}]


@dataclass
class World:
    """Space A with a queue and its create Operation; the people who must not reach them."""

    space: SpaceFixture
    queue: str
    operation: str
    stranger: str  # an editor of another Space only
    revoked: str  # was an editor of A

    def path(self, route: Route) -> str:
        values = {"space": self.space.name, "uid": self.queue, "principal": "nobody-here", "id": "i-1", "worker": "w"}
        if route.template == "/v2/operations/{id}":
            values["id"] = self.operation
        return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], route.template)


@pytest.fixture(scope="module")
async def world(host: Host) -> World:
    space = await new_space(host)
    other = await new_space(host)
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as client:
        r = await client.post(
            f"/v2/spaces/{space.name}/resources",
            headers={**auth(space.editor_token), **key()},
            json={"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 600}},
        )
        assert r.status_code == 202, r.text
        op = r.json()
        done = (await client.get(f"/v2/operations/{op['id']}?wait=30", headers=auth(space.editor_token))).json()
        assert done["state"] == "succeeded", done
        principal = "gone-" + uuid.uuid4().hex[:8]
        r = await client.post(
            "/v2/tokens",
            headers=auth(host.admin_token),
            json={"principal": principal, "grants": [{"space": space.name, "role": "editor"}]},
        )
        revoked = r.json()["token"]
        assert (await client.get("/v2/spaces", headers=auth(revoked))).status_code == 200
        assert (await client.delete(f"/v2/tokens/{principal}", headers=auth(host.admin_token))).status_code == 204
    return World(space, done["resourceUid"], op["id"], other.editor_token, revoked)


async def call(client: httpx.AsyncClient, world: World, route: Route, token: str | None) -> httpx.Response:
    headers = {**(auth(token) if token else {}), **key()}
    body = {} if route.method in {"post", "put"} else None
    return await client.request(route.method.upper(), world.path(route), headers=headers, json=body)


@pytest.mark.parametrize("route", routes(), ids=lambda r: f"{r.method.upper()} {r.template}")
async def test_every_route_turns_away_whoever_may_not_pass(
    client: httpx.AsyncClient, world: World, route: Route
) -> None:
    # QC-15, WF-2: authority comes from the caller's own role in the Space, never from elsewhere.
    if route.public:
        assert (await call(client, world, route, None)).status_code == 200
        return
    for token in (None, "sumi_never-issued", world.revoked):
        assert_problem(await call(client, world, route, token), 401, "unauthenticated")
    stranger = await call(client, world, route, world.stranger)
    if (route.method, route.template) in ADMIN_ONLY:
        assert_problem(stranger, 403, "forbidden")
    elif route.in_space:
        assert_problem(stranger, 404, "not_found")
    else:
        assert stranger.status_code == 200, stranger.text  # the caller's own list, or metrics
        if route.template == "/v2/spaces":
            assert world.space.name not in {s["name"] for s in stranger.json()["items"]}
    viewer = await call(client, world, route, world.space.viewer_token)
    if route.method in WRITES or (route.method, route.template) in ADMIN_ONLY:
        assert_problem(viewer, 403, "forbidden")
    else:
        assert viewer.status_code not in (401, 403), viewer.text


async def test_a_body_over_the_limit_is_refused_before_it_is_read_whole(host: Host, world: World) -> None:
    # QC-52 (the send's limits): a client announcing 100 MiB gets its 413 having sent 64 KiB of them.
    # A raw socket: HTTP clients refuse to send less than they announce.
    url = httpx.URL(host.url)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    path = f"/v2/spaces/{world.space.name}/queues/{world.queue}/messages"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.host}\r\nAuthorization: Bearer {world.space.editor_token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {100 * 1024 * 1024}\r\n\r\n"
    )
    try:
        writer.write(head.encode() + b"x" * 65536)
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 30)  # it never comes if the body is awaited whole
    finally:
        writer.close()
    assert status.split()[1] == b"413", status


async def test_no_secret_reaches_a_record_a_problem_or_the_metrics(
    client: httpx.AsyncClient, host: Host, world: World
) -> None:
    # QC-15, WF-1 (no secret inputs): a token is a bearer's only proof and privateInputs are never
    # returned, so neither may be written down anywhere a reader of the Host can look.
    secret = "private-" + uuid.uuid4().hex
    r = await client.post(
        f"/v2/spaces/{world.space.name}/resources",
        headers={**auth(world.space.editor_token), **key()},
        json={"name": "p", "form": QUEUE, "spec": {"retentionSeconds": 60}, "privateInputs": {"password": secret}},
    )
    assert_problem(r, 400, "invalid_spec")
    secrets = [secret, world.space.editor_token, world.space.viewer_token, world.stranger, world.revoked]
    assert not [s for s in secrets if s in r.text]
    metrics = await client.get("/metrics", headers=auth(world.space.editor_token))
    assert metrics.status_code == 200 and not [s for s in secrets if s in metrics.text]
    found = [s for s in secrets if any(s.encode() in raw for raw in await every_record(host))]
    assert found == [], "a secret is on a topic"


async def every_record(host: Host) -> list[bytes]:
    """The raw bytes (key and value) of every record on every topic of this Host, up to now.

    Read up to the end offsets taken first: the metrics and logs topics never fall quiet.
    """
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=host.settings.kafka_bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    out: list[bytes] = []
    try:
        topics = [t for t in await consumer.topics() if t.startswith(host.settings.topic_prefix + ".")]
        tps = [tp for topic in topics for tp in await kafka.partitions(consumer, topic)]
        await kafka.read_to_end(consumer, tps, lambda m, _: out.append((m.key or b"") + (m.value or b"")))
    finally:
        await consumer.stop()
    return out
