"""A gateway killed between the append and the answer: the retry gets the same decision.

A Resource's decision reaches a gateway as a notification from the projection that writes it
(sumi.gateway._decisions), a workflow command's from the instance log (sumi.gateway._logdecisions).
What decides or announces the decision (the projections, the workflow engine) is held down so the
window between the durable append and the answer stays open; the gateway is SIGKILLed inside
it, restarts, and the client retries with its Idempotency-Key: it gets the first decision (the
same instance, the same Operation), and the log holds one decision, not two.
"""

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from sumi.core import records as r
from sumi.wire import codec
from tests.conformance.kit import Api
from tests.hostkit import Host, new_settings, new_space, running_host
from tests.httpkit import QUEUE, WORKFLOW

pytestmark = pytest.mark.integration

FLOW = """
export class Flow { async run(event, step) { return await step.do("one", async () => ({ ok: true })); } }
"""


@pytest.fixture(scope="module")
def own_host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    # A Host of its own: its gateway and projections are killed and held here.
    with running_host(new_settings(kafka_bootstrap, database_url, decision_timeout=20.0)) as h:
        yield h


async def _records(host: Host, topic: str) -> list[Any]:
    """Every committed record of a topic, decoded."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=host.settings.kafka_bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(host.settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                out += [codec.decode(m.value) for m in messages]
        return out
    finally:
        await consumer.stop()


async def _appended(host: Host, topic: str, idempotency_key: str, timeout: float = 30) -> None:
    """Wait until a command with this Idempotency-Key is durable on `topic`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        recs = await _records(host, topic)
        if any(isinstance(x, r.CommandSubmitted) and x.idempotencyKey == idempotency_key for x in recs):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"no command with key {idempotency_key} on {topic}")


async def _kill_gateway_inside_the_window(
    host: Host, post: Any, topic: str, idempotency_key: str, held: str = "projections"
) -> Any:
    """Hold a service, start the request, kill the gateway once its command is durable,
    then retry (the service released a moment later): the retry's answer."""
    sup = host.supervisor
    await asyncio.to_thread(sup.hold, held)
    try:
        first = asyncio.create_task(post())
        await _appended(host, topic, idempotency_key)
        await asyncio.to_thread(sup.kill, "gateway")
        with pytest.raises(httpx.HTTPError):
            await first  # the answer died with the gateway
        retry = asyncio.create_task(_retry(post))
        await asyncio.sleep(1.0)  # the retry waits for the decision made before the crash
    finally:
        sup.release(held)
    return await retry


async def _retry(post: Any) -> Any:
    for _ in range(120):
        try:
            resp = await post()
            if resp.status_code != 503:
                return resp
        except httpx.HTTPError:
            pass  # the gateway is still restarting
        await asyncio.sleep(0.25)
    raise AssertionError("the retry never got an answer")


async def test_a_workflow_create_retried_after_a_gateway_crash_gets_the_first_decision(own_host: Host) -> None:
    # WF-19: a lost answer is no second run; the retry with the same key is the same instance.
    space = await new_space(own_host)
    async with httpx.AsyncClient(base_url=own_host.url, timeout=60) as client:
        api = Api(client, space)
        worker = await api.worker(source=FLOW, handlers=())
        uid = await api.create(
            f"wf-{uuid.uuid4().hex[:6]}", WORKFLOW, {"worker": {"resourceUid": worker}, "className": "Flow"}
        )
        path = f"/v2/spaces/{space.name}/workflows/{uid}/instances"
        idem = f"create-{uuid.uuid4().hex[:8]}"

        async def post() -> httpx.Response:
            return await client.post(path, headers={**api.h, "Idempotency-Key": idem}, json={"params": {"n": 1}})

        # The engine held: the decision is made only after the first gateway died (WF-18).
        commands = own_host.settings.topic("workflow.commands")
        resp = await _kill_gateway_inside_the_window(own_host, post, commands, idem, held="workflow")
        assert resp.status_code == 201, resp.text
        iid = resp.json()["id"]
        again = await post()  # and once more, now that everything is up: still the same
        assert again.status_code == 201 and again.json()["id"] == iid, again.text
        listed = (await client.get(path, headers=api.h)).json()["items"]
        assert [item["id"] for item in listed] == [iid]
    log = await _records(own_host, own_host.settings.topic("workflow"))
    created = [x for x in log if isinstance(x, r.InstanceCreated) and x.instanceId == iid]
    assert len(created) == 1
    # The retries re-sent the same command ID (derived from the key), decided once: one answer.
    decided = [x for x in log if isinstance(x, r.CommandDecided) and x.result and json.loads(x.result)["id"] == iid]
    assert len(decided) == 1


async def test_a_resource_create_retried_after_a_gateway_crash_gets_the_same_operation(own_host: Host) -> None:
    # QC-46: the retry with the same Idempotency-Key is the same Operation, one Resource.
    space = await new_space(own_host)
    async with httpx.AsyncClient(base_url=own_host.url, timeout=60) as client:
        api = Api(client, space)
        idem = f"queue-{uuid.uuid4().hex[:8]}"
        body = {"name": "jobs", "form": QUEUE, "spec": {"retentionSeconds": 600}}

        async def post() -> httpx.Response:
            return await client.post(
                f"/v2/spaces/{space.name}/resources", headers={**api.h, "Idempotency-Key": idem}, json=body
            )

        resp = await _kill_gateway_inside_the_window(own_host, post, own_host.settings.topic("commands"), idem)
        assert resp.status_code == 202, resp.text
        again = await post()
        assert again.status_code == 202 and again.json()["id"] == resp.json()["id"], again.text
        listed = (await client.get(f"/v2/spaces/{space.name}/resources", headers=api.h)).json()["items"]
        assert [item["name"] for item in listed] == ["jobs"]
