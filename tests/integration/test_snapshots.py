"""The engines' snapshots on a real broker (issue 17, item 3).

A Host whose queue engine snapshots a partition every 15 records: messages are sent, delivered,
acknowledged and left pending; the snapshots it wrote, restored and followed by the log after
them, equal the fold of each partition from offset 0. Then the engine is SIGKILLed and starts
from them: the backlog it never held a body of is delivered byte for byte, nothing settled is
delivered again, and new messages flow. The hot window is 7 messages, so nearly every backlog
here is the queue's cold tail (sumi.queue._cold), in the snapshots and after the restart.
"""

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sumi.core import records as r
from sumi.engines.snapshots import Snapshots, chunk_key, header_key
from sumi.queue.rules._memory import BodyBudget
from sumi.queue.rules._snapshot import restore
from sumi.queue.rules._state import EngineState, evolve
from sumi.wire import codec
from sumi.wire.topics import instance_key, partition_for
from tests.bench.bench_scale import restart
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, committed_log, new_settings, new_space, running_host
from tests.httpkit import WORKFLOW
from tests.integration.test_bounded_memory import HASHING_JS, fnv
from tests.unit.queue.test_snapshot import view

pytestmark = pytest.mark.integration

EVERY = 15
HOT = 7
ACK_JS = "export default { async queue(batch) {} };"  # returning acknowledges the batch (QC-31)


@pytest.fixture(scope="module")
def host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    with running_host(new_settings(kafka_bootstrap, database_url, snapshot_records=EVERY, queue_hot_messages=HOT)) as h:
        yield h


@pytest.fixture
async def api(host: Host) -> AsyncIterator[Api]:
    space = await new_space(host)
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as client:
        yield Api(client, space)


def state_of(host: Host) -> EngineState:
    s = host.settings
    return EngineState(
        settled_window=s.queue_settled_window,
        bodies=BodyBudget(s.queue_body_budget_bytes),
        hot_messages=s.queue_hot_messages,
    )


async def partition_log(host: Host, partition: int) -> tuple[list[Any], int]:
    """The committed records of one partition of the queue log, from offset 0, and its end
    (commit markers take offsets too)."""
    tp = TopicPartition(host.settings.topic("queue"), partition)
    consumer = AIOKafkaConsumer(bootstrap_servers=host.settings.kafka_bootstrap, isolation_level="read_committed")
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out: list[Any] = []
        while await consumer.position(tp) < end:
            out += (await consumer.getmany(tp, timeout_ms=1000)).get(tp, [])
        return [m for m in out if m.offset < end], end
    finally:
        await consumer.stop()


def folded(host: Host, messages: list[Any], state: EngineState | None = None) -> EngineState:
    state = state_of(host) if state is None else state
    for m in messages:
        evolve(state, codec.decode(m.value), (m.partition, m.offset))
    return state


async def test_a_snapshot_and_the_log_after_it_equal_the_fold_from_the_start(host: Host, api: Api) -> None:
    # QC-21, QC-24, QC-31, QC-43: what a start from a snapshot holds is what a full fold holds
    q, backlog = await api.queue(), await api.queue()
    worker = await api.worker(ACK_JS)
    await api.consumer(q, worker, maxBatchSize=10)
    for i in range(8):
        await api.send(q, *[f"m{i}-{j}" for j in range(25)])
        await api.send(backlog, *[f"b{i}-{j}" for j in range(10)])
    await api.until(q, timeout=120, acknowledged=200, inFlight=0)

    snapshots = Snapshots(host.settings, "queue")
    await snapshots.start()
    try:
        checked = 0
        for p in {partition_for(q, host.settings.partitions), partition_for(backlog, host.settings.partitions)}:
            snapshot = await snapshots.latest(p)
            assert snapshot is not None, f"partition {p} has no snapshot after {EVERY}+ records"
            log, end = await partition_log(host, p)
            assert 0 < snapshot.header.covers <= end
            tail = [m for m in log if m.offset >= snapshot.header.covers]
            restored = state_of(host)
            restore(restored, p, snapshot.chunks)  # type: ignore[arg-type]
            whole = folded(host, log)
            if p == partition_for(backlog, host.settings.partitions):
                assert len(whole.queue(backlog).cold) == 80 - HOT  # the backlog past the window
            assert view(folded(host, tail, restored)) == view(whole)  # (a view warms every row)
            checked += 1
        assert checked >= 1
    finally:
        await snapshots.stop()


async def test_a_snapshot_missing_a_chunk_is_no_snapshot(host: Host) -> None:
    # QC-43: a start never decides on a partial state; it folds the partition from offset 0
    snapshots = Snapshots(host.settings, "queue-test")
    await ensure_topic(host, snapshots.topic)
    await snapshots.start()
    try:
        chunk = r.QueueSnapshotChunk("snap_a", 0, [], [])
        await snapshots.write(0, 10, "snap_a", [chunk, r.QueueSnapshotChunk("snap_a", 1, [], [])], 0)
        whole = await snapshots.latest(0)
        assert whole is not None and whole.header.covers == 10 and len(whole.chunks) == 2
        # The cleaner took a chunk of the latest snapshot away (a writer that tombstoned it late):
        # its header names three chunks, two are there.
        assert snapshots.producer is not None
        for i in range(2):
            value = codec.encode(r.QueueSnapshotChunk("snap_b", i, [], []))
            await snapshots.producer.send_and_wait(snapshots.topic, value, key=chunk_key(0, "snap_b", i), partition=0)
        header = r.SnapshotHeader("queue-test", 0, "snap_b", 20, 3, whole.header.firstChunkOffset + 3, 0, 0)
        await snapshots.producer.send_and_wait(snapshots.topic, codec.encode(header), key=header_key(0), partition=0)
        assert await snapshots.latest(0) is None
    finally:
        await snapshots.stop()


async def ensure_topic(host: Host, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=host.settings.kafka_bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()


async def test_a_restarted_engine_starts_from_its_snapshots_and_loses_nothing(host: Host, api: Api) -> None:
    # QC-21, QC-22, QC-24, QC-31, QC-43: bodies read back by offset, settled messages stay settled
    q, backlog = await api.queue(), await api.queue()
    bodies = {f"b{i:03d}-".encode() + bytes(range(i % 256)) for i in range(120)}
    ids: dict[str, bytes] = {}
    for chunk in [sorted(bodies)[i : i + 30] for i in range(0, 120, 30)]:
        ids.update(zip(await api.send(backlog, *chunk), chunk, strict=True))
    worker = await api.worker(ACK_JS)
    await api.consumer(q, worker, maxBatchSize=10)
    for i in range(4):
        await api.send(q, *[f"m{i}-{j}" for j in range(25)])
    await api.until(q, timeout=120, acknowledged=100, inFlight=0)
    snapshots = Snapshots(host.settings, "queue")
    await snapshots.start()
    try:
        deadline = time.monotonic() + 120  # a loaded CI machine
        p = partition_for(backlog, host.settings.partitions)
        while (snapshot := await snapshots.latest(p)) is None or snapshot.header.covers < len(ids):
            assert time.monotonic() < deadline, "the backlog's partition was never snapshotted"
            await asyncio.sleep(0.5)
    finally:
        await snapshots.stop()

    restart(host, "queue")  # it starts from the snapshot, holding not one of the backlog's bodies
    report = await api.queue()
    reporter = await api.worker(HASHING_JS, bindings={"REPORT": report})
    await api.consumer(backlog, reporter, maxBatchSize=10)
    await api.send(q, *[f"after-{j}" for j in range(20)])
    await api.until(backlog, timeout=180, acknowledged=120, inFlight=0, ready=0)
    await api.until(q, timeout=120, acknowledged=120, inFlight=0)

    seen = await api.reports(report, 120, timeout=120)
    assert {s["id"]: (s["len"], s["fnv"]) for s in seen} == {mid: (len(b), fnv(b)) for mid, b in ids.items()}
    acked = Counter(
        mid
        for rec in await committed_log(host, "queue")
        if isinstance(rec, r.MessagesAcknowledged)
        for mid in rec.messageIds
    )
    assert all(acked[mid] == 1 for mid in ids) and sum(acked.values()) == len(acked)


FLOW = """
export class Flow {
  async run(event, step) {
    const a = await step.do('a', async () => ({ n: event.params.n }));
    const b = await step.do('b', async () => ({ n: a.n * 2 }));
    if (event.params.wait) {
      const e = await step.waitForEvent('w', { type: 'go', timeoutSeconds: 600 });
      return { n: b.n, got: e.v };  // waitForEvent gives the payload
    }
    return { n: b.n };
  }
}
"""


async def test_a_restarted_workflow_engine_starts_from_its_snapshots(host: Host, api: Api) -> None:
    # WF-21, WF-36, WF-43, WF-46: instances restored from a snapshot go on where they were
    worker = await api.worker(source=FLOW, handlers=())
    uid = await api.create(
        f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": worker}, "className": "Flow"}
    )
    flows = Flows(api, uid)
    done = [await flows.started(id=f"done-{i}", params={"n": i}) for i in range(12)]
    waiting = [await flows.started(id=f"wait-{i}", params={"n": i, "wait": True}) for i in range(6)]
    for iid in done:
        await flows.until(iid, "complete")
    for iid in waiting:
        await flows.until(iid, "waiting")
    snapshots = Snapshots(host.settings, "workflow")
    await snapshots.start()
    try:
        deadline = time.monotonic() + 30
        parts = {partition_for(instance_key(uid, iid), host.settings.partitions) for iid in waiting}
        while not all([await snapshots.latest(p) is not None for p in parts]):
            assert time.monotonic() < deadline, "the waiting instances' partitions were never snapshotted"
            await asyncio.sleep(0.5)
    finally:
        await snapshots.stop()

    restart(host, "workflow")  # it restores the waiting instances from their snapshots
    for i, iid in enumerate(waiting):  # a client retries a 503 while the engine comes back, same key
        deadline = time.monotonic() + 60
        while (resp := await flows.event(iid, {"type": "go", "payload": {"v": i}}, key=f"go-{iid}")).status_code == 503:
            assert time.monotonic() < deadline, resp.text
            await asyncio.sleep(1)
        assert resp.status_code == 202, resp.text
    later = await flows.started(id="later", params={"n": 50})
    for i, iid in enumerate(waiting):
        assert (await flows.until(iid, "complete"))["output"] == {"n": 2 * i, "got": i}
    assert (await flows.until(later, "complete"))["output"] == {"n": 100}
    for i, iid in enumerate(done):
        assert (await flows.until(iid, "complete"))["output"] == {"n": 2 * i}
    steps = Counter(
        (rec.instanceId, rec.name)
        for rec in await committed_log(host, "workflow")
        if isinstance(rec, r.StepAttemptCommitted) and rec.workflowUid == uid and rec.final
    )
    assert set(steps.values()) == {1}  # nothing run again after the restart (WF-36)
    assert len(steps) == 2 * len(done) + 3 * len(waiting) + 2
