"""A replica name is one live process's (issue 40): a second `sumi serve SERVICE` under the name a
live replica holds is refused at start, exit 2 with one line naming SUMI_REPLICA, and the live
one keeps deciding; a replica SIGKILLed and started again under its name starts (sumi.host.replica)."""

import asyncio
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from aiokafka import AIOKafkaConsumer

from sumi.host import replica as _replica
from sumi.wire import kafka
from sumi.wire.membership import Membership
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, new_settings, new_space, running_host, scratch_topic, serve_replica, stable_members
from tests.httpkit import WORKFLOW

pytestmark = pytest.mark.integration

ACK_JS = """
export default {
  async queue(batch, env, ctx) {
    for (const m of batch.messages) await batch.acknowledge(m.id);
  },
};
export class Flow {
  async run(event, step) {
    return await step.do("one", async () => ({ ok: true }));
  }
}
"""


@pytest.fixture(scope="module")
def own_host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    with running_host(new_settings(kafka_bootstrap, database_url)) as h:
        yield h


async def _decides(host: Host) -> None:
    """Every service at work: a version verified, a message acknowledged, an instance completed."""
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as c:
        api = Api(c, await new_space(host))
        q = await api.queue()
        w = await api.worker(source=ACK_JS, handlers=("queue",))
        await api.consumer(q, w)
        flows = Flows(
            api,
            await api.create(
                f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": w}, "className": "Flow"}
            ),
        )
        await api.send(q, "m")
        iid = await flows.started()
        assert (await flows.until(iid, "complete", "errored"))["status"] == "complete"
        await api.until(q, acknowledged=1)


def _stop(proc: "subprocess.Popen[bytes]") -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _logged(log: Path) -> dict[str, Any]:
    """stderr to a file: a pipe nobody reads while the process runs fills up and stops it."""
    return {"stderr": log.open("wb")}


SERVICES = ("workflow", "queue", "projections", "verifier")


async def test_a_second_replica_under_a_live_replicas_name_is_refused_and_the_live_one_decides(
    own_host: Host, tmp_path: Path
) -> None:
    # WF-46, QC-43: two static members under one name would fence each other every heartbeat and
    # neither decide; the copy of each service is refused, the Host's own replicas go on deciding.
    # The four copies start together: each is refused on its own name lock, whatever the others do.
    name = own_host.supervisor.env["SUMI_REPLICA"]
    copies = {s: serve_replica(own_host, s, name, **_logged(tmp_path / f"{s}.log")) for s in SERVICES}
    try:
        await _decides(own_host)  # while the copies wait for the name
        await asyncio.gather(*(_refused(p, tmp_path / f"{s}.log", name, s) for s, p in copies.items()))
        await _decides(own_host)
    finally:
        for copy in copies.values():
            _stop(copy)


# service -> (its engine's group, the topic that group reads)
ENGINE_GROUPS = {"workflow": ("workflow-engine", "workflow.commands"), "queue": ("queue-engine", "queue")}
FENCED_WITHIN_S = 90.0


async def test_a_replica_fenced_in_kafka_at_run_time_stops_and_the_host_decides(own_host: Host, tmp_path: Path) -> None:
    # WF-46, QC-43: a member that never asked Postgres for the name (an older version, another
    # database) joins under a running replica's static member ID: the replica stops with exit 2
    # and the line, never loops fencing it back, and the Host's own replica goes on deciding.
    # Both engines at once: their groups are independent.
    await asyncio.gather(*(_fenced(own_host, service, tmp_path) for service in sorted(ENGINE_GROUPS)))
    await _decides(own_host)


async def _fenced(own_host: Host, service: str, tmp_path: Path) -> None:
    settings = own_host.settings
    name = f"fenced-{service}"
    group, topic = ENGINE_GROUPS[service]
    log = tmp_path / f"{service}.log"
    # Only the Host's own member first: a member an earlier test killed is still in the group until
    # its session ends, and a static member replaced while that rebalance runs is refused UnknownError.
    await stable_members(settings.kafka_bootstrap, [f"{settings.topic_prefix}-{group}"], 1)
    replica = serve_replica(own_host, service, name, **_logged(log))
    intruder: AIOKafkaConsumer | None = None
    try:
        await stable_members(settings.kafka_bootstrap, [f"{settings.topic_prefix}-{group}"], 2)
        intruder = AIOKafkaConsumer(
            settings.topic(topic),
            bootstrap_servers=settings.kafka_bootstrap,
            group_id=f"{settings.topic_prefix}-{group}",
            group_instance_id=f"{group}-{name}",
            session_timeout_ms=10_000,
            heartbeat_interval_ms=2_000,
            enable_auto_commit=False,
        )
        await intruder.start()
        fenced_at = time.monotonic()
        polling = asyncio.create_task(_poll(intruder))
        try:
            await _refused(replica, log, name, service, fenced=True, timeout=FENCED_WITHIN_S)
        finally:
            polling.cancel()
            await asyncio.gather(polling, return_exceptions=True)
        print(f"\n{service}: the fenced replica stopped {time.monotonic() - fenced_at:.1f} s after the intruder joined")
    finally:
        if intruder is not None:
            await intruder.stop()  # a static member does not leave: its session expires
        _stop(replica)
    await stable_members(settings.kafka_bootstrap, [f"{settings.topic_prefix}-{group}"], 1)


async def test_a_replica_killed_and_started_again_under_its_name_starts(own_host: Host, tmp_path: Path) -> None:
    # WF-46: a dead replica's name is free again for its restart (its lock went with its
    # connection), and held again by the restarted one.
    group = f"{own_host.settings.topic_prefix}-workflow-engine"
    first = serve_replica(own_host, "workflow", "again")
    again: subprocess.Popen[bytes] | None = None
    try:
        await stable_members(own_host.settings.kafka_bootstrap, [group], 2)
        first.send_signal(signal.SIGKILL)
        first.wait()
        started = time.monotonic()
        again = serve_replica(own_host, "workflow", "again")
        await _held(own_host, "sumi workflow again")
        print(f"\nrestarted under its name: holds it {time.monotonic() - started:.1f} s after the kill")
        assert again.poll() is None
        copy = serve_replica(own_host, "workflow", "again", **_logged(tmp_path / "copy.log"))
        await _refused(copy, tmp_path / "copy.log", "again", "workflow")
    finally:
        _stop(first)
        if again is not None:
            _stop(again)


class _StuckOwner:
    """An owner whose revocation never returns once it held partitions: a member fenced then
    stays out of its group after one warning, as the rebalances that hung in hand tries did."""

    def __init__(self) -> None:
        self.held = False
        self.released = asyncio.Event()  # (aiokafka's stop waits for the callback)

    async def assigned(self, tps: list[Any]) -> None:
        self.held = self.held or bool(tps)

    async def revoked(self, tps: list[Any]) -> None:
        if self.held:
            await self.released.wait()


async def test_a_static_member_fenced_and_stuck_out_of_its_group_is_found_fenced(
    kafka_bootstrap: str, database_url: str
) -> None:
    # WF-46, QC-43: fenced once, then no second warning (its rejoin hangs): found by the member
    # being out of its group while its coordinator answers, after STALLED_S of checks, not before.
    settings = new_settings(kafka_bootstrap, database_url)
    group = f"{settings.topic_prefix}-fenced"
    found: list[bool] = []
    stalls = _replica._Stalls(lambda: found.append(True))
    async with scratch_topic(kafka_bootstrap, "fenced", 3) as topic:
        member = kafka.new_consumer(settings, group, group_instance_id="m-1", heartbeat_interval_ms=1000)
        intruder = AIOKafkaConsumer(
            topic, bootstrap_servers=kafka_bootstrap, group_id=group, group_instance_id="m-1", enable_auto_commit=False
        )
        polls: list[asyncio.Task[None]] = []
        owner = _StuckOwner()
        try:
            await member.start()
            Membership("fenced", member, owner).subscribe(topic)
            polls.append(asyncio.create_task(_poll(member)))
            await _until(lambda: _replica.in_group(member) is True)
            stalls.check(0.0)
            await intruder.start()
            polls.append(asyncio.create_task(_poll(intruder)))
            await _until(lambda: _replica.in_group(member) is False)
            stalls.check(100.0)
            stalls.check(100.0 + _replica.STALLED_S - 1)
            assert not found
            stalls.check(100.0 + _replica.STALLED_S)
            assert found == [True]
        finally:
            for poll in polls:
                poll.cancel()
            await asyncio.gather(*polls, return_exceptions=True)
            owner.released.set()
            await member.stop()
            await intruder.stop()


async def _until(ok: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "never"
        await asyncio.sleep(0.2)


async def _poll(consumer: AIOKafkaConsumer) -> None:
    """Keep a member alive in its group as a service's loop would (records are not ours to take)."""
    while True:
        await consumer.getmany(timeout_ms=500)


async def _held(host: Host, application: str, timeout: float = 60) -> None:
    """Until a session of that application name holds an advisory lock (sumi.host.replica's)."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(host.settings.database_url, autocommit=True) as conn:
        while True:
            held = await (
                await conn.execute(
                    "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                    " WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s",
                    (application,),
                )
            ).fetchone()
            if held:
                return
            assert time.monotonic() < deadline, f"{application} never held its name"
            await asyncio.sleep(0.2)


async def _refused(
    proc: "subprocess.Popen[bytes]", log: Path, name: str, service: str, fenced: bool = False, timeout: float = 90
) -> None:
    code = await asyncio.to_thread(proc.wait, timeout)
    err = log.read_text()
    assert code == 2, err[-5000:]
    line = [x for x in err.splitlines() if x.startswith("sumi: ")]
    assert line and f"SUMI_REPLICA={name!r}" in line[-1] and f"`{service}`" in line[-1], err[-5000:]
    assert ("fenced in Kafka" in line[-1]) == fenced, line[-1]
