"""Failover test: a Host on a three-broker KRaft cluster (replication 3, min.insync.replicas 2)
while one broker, the one leading the most partitions, is SIGKILLed under queue and workflow load.

Sends go on over HTTP (each POST retried with its Idempotency-Key until answered) and workflow
instances are started before and after the kill. Every partition the dead broker led gets a
new leader; then every sent message must be acknowledged exactly once (read from the queue
log), every instance complete with its output, and the control plane still deciding. The time
from the kill to the first accepted send, to the first settled message sent after the kill,
and to the whole backlog settled is printed.
"""

import asyncio
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from sumi.core import records as r
from sumi.infra import KafkaCluster
from tests.chaos.test_queue_crash import history
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, new_settings, new_space, running_host
from tests.httpkit import WORKFLOW, b64

pytestmark = pytest.mark.integration

POSTS, PER_POST, KILL_AFTER = 16, 25, 5  # sends; the kill comes after the first KILL_AFTER
INSTANCES = 5  # workflow instances started before the kill, and as many after
# The long form: kill a broker, bring it back, kill the next one, this many times.
ROUNDS = int(os.environ.get("SUMI_TEST_FAILOVER_ROUNDS", "1"))
# One worker for both: a queue handler that acknowledges all, and the workflow class.
WORKER_JS = """
export default { async queue(batch) { for (const m of batch.messages) await batch.acknowledge(m.id); } };
export class Flow {
  async run(event, step) {
    let n = 0;
    for (const name of ["a", "b", "c"]) n = (await step.do(name, async () => ({ n: n + 1 }))).n;
    return { n, id: event.instanceId };
  }
}
"""


PHASES: dict[str, float] = {}  # how long each part of the test took, printed with its figures


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    started = time.monotonic()
    with KafkaCluster() as c:
        PHASES["cluster start"] = time.monotonic() - started
        yield c


@pytest.fixture(scope="module")
def cluster_host(cluster: KafkaCluster, database_url: str) -> Iterator[Host]:
    started = time.monotonic()
    with running_host(new_settings(cluster.bootstrap, database_url, replication=3)) as h:
        PHASES["Host start"] = time.monotonic() - started
        yield h


async def retried(call: Any, what: str, attempts: int = 150) -> httpx.Response:
    """The answer of an idempotent call, asked again while the Host cannot answer (503, no connection)."""
    for _ in range(attempts):
        try:
            resp: httpx.Response = await call()
            if resp.status_code < 500:
                return resp
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} never answered")


async def leaders(bootstrap: str, prefix: str) -> dict[tuple[str, int], int]:
    """The leader of every partition of the Host's topics and of Kafka's internal ones."""
    for _ in range(20):
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            await admin.start()
            topics = [t for t in await admin.list_topics() if t.startswith((prefix + ".", "__"))]
            described = await admin.describe_topics(topics)
            return {(t["topic"], p["partition"]): p["leader"] for t in described for p in t["partitions"]}
        except KafkaError:  # it asked a broker the metadata still named, and that one is gone
            await asyncio.sleep(0.5)
        finally:
            await admin.close()
    raise AssertionError("no broker answered for the partitions' leaders")


class Load:
    """Sends and workflow starts, each stamped with when the Host accepted it."""

    def __init__(self, api: Api, queue: str, flows: Flows) -> None:
        self.api, self.queue, self.flows = api, queue, flows
        self.sent: list[tuple[float, list[str]]] = []
        self.started: list[str] = []

    async def send(self, i: int) -> None:
        key = f"send-{self.queue}-{i}"
        body = {"messages": [{"body": b64(f"m-{i}-{j}")} for j in range(PER_POST)]}
        path = f"/v2/spaces/{self.api.space}/queues/{self.queue}/messages"
        resp = await retried(
            lambda: self.api.c.post(path, headers={**self.api.h, "Idempotency-Key": key}, json=body), key
        )
        assert resp.status_code == 202, resp.text
        self.sent.append((time.monotonic(), resp.json()["messageIds"]))

    async def start(self, n: int) -> None:
        iid = f"i-{n}"
        resp = await retried(lambda: self.flows.create({"id": iid}, key=iid), iid)
        assert resp.status_code == 201, resp.text
        self.started.append(iid)

    async def run(self, first: int, last: int, instances: range) -> None:
        for n in instances:
            await self.start(n)
        for i in range(first, last):
            await self.send(i)
            await asyncio.sleep(0.05)


async def test_broker_killed_under_load(cluster: KafkaCluster, cluster_host: Host) -> None:
    # QC-43, QC-44, WF-41: a broker's death loses nothing, settles nothing twice, and every service goes on
    host = cluster_host
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=host.url, timeout=30) as client:
        api = Api(client, await new_space(host))
        queue = await api.queue()
        worker = await api.worker(WORKER_JS)
        await api.consumer(queue, worker, maxBatchSize=20, maxConcurrency=4)
        spec = {"worker": {"resourceUid": worker}, "className": "Flow"}
        flows = Flows(api, await api.create(f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, spec))
        PHASES["resources"] = time.monotonic() - started
        load = Load(api, queue, flows)
        figures = []
        for n in range(ROUNDS):
            victim, line = await one_broker_killed(cluster, host, load, n)
            figures.append(line)
            if n + 1 < ROUNDS:  # the long form: the victim comes back and catches up, then the next one dies
                await asyncio.to_thread(cluster.restart, victim - 1)
                await all_in_sync(cluster.bootstrap, host.settings.topic_prefix)

    sent = [m for _, ids in load.sent for m in ids]
    log = await history(host.settings, queue)
    acked = [m for x in log if isinstance(x, r.MessagesAcknowledged) for m in x.messageIds]
    assert len(sent) == len(set(sent)) == ROUNDS * POSTS * PER_POST
    assert {x.messageId for x in log if isinstance(x, r.MessageAccepted)} == set(sent)  # nothing lost
    assert len(acked) == len(set(acked)) and set(acked) == set(sent)  # each settled once
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in PHASES.items())
    print("", *figures, f"({phases})", sep="\n", file=sys.stderr)


async def one_broker_killed(cluster: KafkaCluster, host: Host, load: Load, n: int) -> tuple[int, str]:
    """Load, the broker leading the most partitions SIGKILLed, more load; everything settled and
    complete, and a new Resource created, after the partitions it led have new leaders."""
    sends, first = n * POSTS, 2 * n * INSTANCES
    await load.run(sends, sends + KILL_AFTER, range(first, first + INSTANCES))
    before = await leaders(cluster.bootstrap, host.settings.topic_prefix)
    pids = {name: proc.pid for name, proc in host.supervisor.procs.items()}
    victim = Counter(before.values()).most_common(1)[0][0]
    killed_at = time.monotonic()
    await asyncio.to_thread(cluster.kill, victim - 1)  # node IDs count from 1
    await load.run(sends + KILL_AFTER, sends + POSTS, range(first + INSTANCES, first + 2 * INSTANCES))

    total = (n + 1) * POSTS * PER_POST
    stats = await settled(load.api, load.queue, total)
    assert (stats["ready"], stats["inFlight"], stats["deadLettered"]) == (0, 0, 0), stats
    drained = time.monotonic()
    for iid in load.started:
        done = await load.flows.until(iid, "complete", "errored", "terminated", timeout=60)
        assert done["status"] == "complete" and done["output"] == {"n": 3, "id": iid}, done
    instances_done = time.monotonic()
    await load.api.queue()  # the control plane decides after the move too: a new Resource, projected

    survivors = ",".join(b.bootstrap for b in cluster.brokers if b.node_id != victim)
    moved = await leaders(survivors, host.settings.topic_prefix)
    led = [tp for tp, leader in before.items() if leader == victim]
    assert led and all(moved[tp] not in (victim, -1) for tp in led), moved
    restarted = sorted(name for name, proc in host.supervisor.procs.items() if proc.pid != pids[name])
    resumed = min(at for at, _ in load.sent if at > killed_at)
    return victim, (
        f"broker {victim} of 3 SIGKILLed, leading {len(led)} partitions: sends accepted again after "
        f"{resumed - killed_at:.1f}s, all {total} messages settled after {drained - killed_at:.1f}s, "
        f"{len(load.started)} instances complete after {instances_done - killed_at:.1f}s; "
        f"services restarted by the supervisor: {', '.join(restarted) or 'none'}"
    )


async def all_in_sync(bootstrap: str, prefix: str, timeout: float = 120) -> None:
    """Until every partition has all three replicas in sync again (a restarted broker caught up)."""
    deadline = time.monotonic() + timeout
    while True:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            await admin.start()
            topics = [t for t in await admin.list_topics() if t.startswith((prefix + ".", "__"))]
            if all(len(p["isr"]) == 3 for t in await admin.describe_topics(topics) for p in t["partitions"]):
                return
        except KafkaError:
            pass
        finally:
            await admin.close()
        assert time.monotonic() < deadline, "the restarted broker never caught up"
        await asyncio.sleep(0.5)


async def settled(api: Api, queue: str, total: int, timeout: float = 60) -> dict[str, Any]:
    """The queue's stats once `total` messages are acknowledged (asked again while the Host cannot answer)."""
    deadline = time.monotonic() + timeout
    path = f"/v2/spaces/{api.space}/queues/{queue}/stats"
    while True:
        stats: dict[str, Any] = (await retried(lambda: api.c.get(path, headers=api.h), "stats")).json()
        if stats["acknowledged"] >= total:
            return stats
        assert time.monotonic() < deadline, f"{stats['acknowledged']} of {total} settled: {stats}"
        await asyncio.sleep(0.2)
