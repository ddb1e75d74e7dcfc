"""Bad records on any topic a processor reads are quarantined, and the Host goes on (issue 7, item 4).

A raw producer writes records that are not Avro, carry an unknown schema fingerprint, are
empty, or are truncated, to every partition of every topic a processor reads (commands,
control, queue, workflow.commands, workflow, quarantine itself), plus a schema-valid record
the control projection cannot apply. Afterwards, also across a restart of every processor
(state folded again from logs that now hold them): Spaces are created over HTTP, a queue
delivers to a JS worker and its messages are acknowledged, the read models move, no
processor is in a restart loop, the quarantine topic holds each bad record with its reason,
source and raw bytes, /metrics counts them, and `sumi replay` reports them instead of failing.
"""

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from sumi.core import records as r
from sumi.host.audit import replay_and_compare
from sumi.wire import codec
from tests.conformance.kit import Api
from tests.hostkit import Host, new_settings, new_space, running_host

pytestmark = pytest.mark.integration

ACK_JS = """
export default {
  async queue(batch, env, ctx) {
    for (const m of batch.messages) await batch.acknowledge(m.id);
  },
};
"""


@pytest.fixture(scope="module")
def own_host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    with running_host(new_settings(kafka_bootstrap, database_url)) as h:
        yield h


def _bad_values(valid: bytes) -> dict[str, bytes]:
    """One value per reason; `valid` is a well-formed record of the topic, cut for `truncated`."""
    return {
        "not_avro": b'{"kind": "space.create", "space": "not-avro"}',
        "unknown_schema": codec.MAGIC + os.urandom(8) + valid[10:],
        "empty": b"",
        "truncated": valid[: len(valid) // 2 + 5],
    }


def _valid_record(topic: str) -> bytes:
    """A record that belongs on `topic` (its truncation keeps a known fingerprint)."""
    if topic in ("commands", "workflow.commands"):
        rec: Any = r.CommandSubmitted("c1", "space.create", "x", "p", True, '{"name": "x"}', 1)
    elif topic == "control":
        rec = r.SpaceCreated("a-space-with-a-long-name-to-cut", 1)
    elif topic == "queue":  # the engine's fast path reads MessageAccepted by fingerprint alone
        rec = r.MessageAccepted("res_q", "demo", "msg_1", b"body" * 20, 1, 1)
    elif topic == "workflow":
        rec = r.InstanceCreated("res_wf", "instance-with-a-long-id", "demo", 1, '{"a": 1}')
    else:
        rec = r.RecordQuarantined("p", "t", 0, 1, "empty", "the record has no value", 1, b"xyz" * 10)
    return codec.encode(rec)


# Which processor must have quarantined a bad record on each topic (others may have too).
FIRST_READER = {
    "commands": "control",
    "control": "projection-control",
    "queue": "projection-queue",
    "quarantine": "projection-quarantine",
    "workflow.commands": "workflow-engine",
    "workflow": "projection-workflow",
}


async def _inject(host: Host) -> dict[tuple[str, int, int], tuple[str, str, bytes]]:
    """Write every bad value to every partition of every topic; returns what went where."""
    s = host.settings
    written: dict[tuple[str, int, int], tuple[str, str, bytes]] = {}
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for short in FIRST_READER:
            topic = s.topic(short)
            for partition in range(s.partitions):
                for reason, value in _bad_values(_valid_record(short)).items():
                    md = await producer.send_and_wait(topic, value, key=b"junk", partition=partition)
                    written[(topic, partition, md.offset)] = (FIRST_READER[short], reason, value)
        # Schema-valid, yet the control projection cannot apply it (its spec is not JSON for
        # the jsonb column); the folds of the control log skip it alike.
        broken = codec.encode(r.ResourceCreated("res_broken", "nowhere", "b", "f", "{not json", 1, "op_b", 1))
        md = await producer.send_and_wait(s.topic("control"), broken, key=b"nowhere", partition=0)
        written[(s.topic("control"), 0, md.offset)] = ("projection-control", "apply_failed", broken)
    finally:
        await producer.stop()
    return written


async def _quarantined(
    host: Host, want: set[tuple[str, int, int, str]], timeout: float = 60
) -> list[r.RecordQuarantined]:
    """Every RecordQuarantined on the quarantine topic, once those of `want` (source topic,
    partition, offset, processor) are all there (or the time is up)."""
    s = host.settings
    consumer = AIOKafkaConsumer(
        bootstrap_servers=s.kafka_bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    found: list[r.RecordQuarantined] = []
    try:
        tps = [TopicPartition(s.topic("quarantine"), p) for p in range(s.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        missing = set(want)
        while missing and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for m in messages:
                    try:
                        rec = codec.decode(m.value)
                    except ValueError:
                        continue  # the bad records this test wrote here itself
                    if isinstance(rec, r.RecordQuarantined):
                        found.append(rec)
                        missing.discard((rec.sourceTopic, rec.partition, rec.offset, rec.processor))
    finally:
        await consumer.stop()
    return found


async def _still_serves(host: Host) -> None:
    """A new Space over HTTP; in it a queue that delivers to a JS worker, which acknowledges."""
    space = await new_space(host)  # the Space and its tokens over HTTP
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as c:
        api = Api(c, space)
        # Operations are read from the control read model: create() waiting for each proves it moves.
        queue = await api.queue()
        worker = await api.worker(ACK_JS)  # its Version verified by the verifier
        await api.consumer(queue, worker)
        ids = await api.send(queue, "m1", "m2", "m3")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stats = await api.stats(queue)  # the queue read model
            if stats["acknowledged"] >= len(ids):
                break
            await asyncio.sleep(0.2)
        assert stats["acknowledged"] == len(ids), stats


async def _deciding_again(host: Host, timeout: float = 180) -> None:
    """Wait until the restarted control processor decides again (a rebuild takes a while on a
    loaded machine, longer than one request's decision timeout)."""
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient(base_url=host.url, timeout=30) as c:
        while True:
            resp = await c.post("/v2/spaces", json={"name": f"back-{time.monotonic_ns()}"}, headers=admin)
            if resp.status_code == 201:
                return
            assert resp.status_code == 503 and time.monotonic() < deadline, resp.text
            await asyncio.sleep(1)


def _pids(host: Host) -> dict[str, int]:
    return {name: proc.pid for name, proc in host.supervisor.procs.items()}


@pytest.mark.timeout(900)  # a whole Host restarted once, on a machine shared with other work
async def test_bad_records_on_every_topic_are_quarantined_and_the_host_goes_on(own_host: Host) -> None:
    # QC-21 (a queue delivers), QC-31 (acknowledge) and the issue-7 quarantine rule
    host = own_host
    await _still_serves(host)  # warm: every processor has read its topics once
    before = _pids(host)

    written = await _inject(host)
    assert len(written) == 4 * len(FIRST_READER) * host.settings.partitions + 1

    found = await _quarantined(host, {(t, p, o, proc) for (t, p, o), (proc, _, _) in written.items()})
    by_source: dict[tuple[str, int, int], list[r.RecordQuarantined]] = {}
    for q in found:
        by_source.setdefault((q.sourceTopic, q.partition, q.offset), []).append(q)
    for (topic, partition, offset), (processor, reason, value) in written.items():
        mine = [q for q in by_source.get((topic, partition, offset), []) if q.processor == processor]
        assert mine, f"{topic}[{partition}]@{offset} ({reason}) not quarantined by {processor}: {by_source}"
        assert all(q.reason == reason and q.value == value and q.key in (b"junk", b"nowhere") for q in mine), mine
        assert all(q.detail for q in mine)

    await _still_serves(host)
    assert _pids(host) == before, "a processor restarted: a bad record stopped it"

    # Every processor folds its logs again, bad records included: no crash loop.
    killed = tuple(n for n in ("control", "queue", "verifier", "projections", "workflow") if n in before)
    for name in killed:
        host.supervisor.kill(name)  # the supervisor starts it again
    for _ in range(100):
        restarted = _pids(host)
        if all(restarted[n] != before[n] for n in killed):
            break
        await asyncio.sleep(0.2)
    await _deciding_again(host)
    await _still_serves(host)
    await asyncio.sleep(2)
    assert _pids(host) == restarted, "a processor restarted again after its restart: a crash loop"

    async with httpx.AsyncClient(base_url=host.url, timeout=30) as c:
        metrics = await c.get("/metrics", headers={"Authorization": f"Bearer {host.admin_token}"})
    assert metrics.status_code == 200
    counted = {
        line.split("{", 1)[1].split("}", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.text.splitlines()
        if line.startswith("sumi_quarantined_records{")
    }
    commands = host.settings.topic("commands")
    assert counted[f'processor="control",reason="not_avro",topic="{commands}"'] == host.settings.partitions, counted
    assert counted[f'processor="projection-queue",reason="truncated",topic="{host.settings.topic("queue")}"'] == (
        host.settings.partitions
    ), counted

    # The audit reports what its replay quarantines (everything bad the projections read) and
    # still finds the live read models identical to the replayed ones.
    audit = await replay_and_compare(host.settings, timeout=60)
    assert audit.differences == []
    reported = {(q.sourceTopic, q.partition, q.offset, q.reason) for q in audit.quarantined}
    expected = {
        (t, p, o, reason) for (t, p, o), (processor, reason, _) in written.items() if processor.startswith("projection")
    }
    assert expected <= reported, expected - reported
