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

from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, new_settings, new_space, running_host, serve_replica, stable_members
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


@pytest.mark.parametrize("service", ["workflow", "queue", "projections", "verifier"])
async def test_a_second_replica_under_a_live_replicas_name_is_refused_and_the_live_one_decides(
    own_host: Host, service: str, tmp_path: Path
) -> None:
    # WF-46, QC-43: two static members under one name would fence each other every heartbeat and
    # neither decide; the copy is refused, the Host's own replica goes on deciding.
    name = own_host.supervisor.env["SUMI_REPLICA"]
    copy = serve_replica(own_host, service, name, **_logged(tmp_path / "copy.log"))
    try:
        await _decides(own_host)  # while the copy waits for the name
        await _refused(copy, tmp_path / "copy.log", name, service)
        await _decides(own_host)
    finally:
        _stop(copy)


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


async def _refused(proc: "subprocess.Popen[bytes]", log: Path, name: str, service: str, fenced: bool = False) -> None:
    code = await asyncio.to_thread(proc.wait, 90)
    err = log.read_text()
    assert code == 2, err[-5000:]
    line = [x for x in err.splitlines() if x.startswith("sumi: ")]
    assert line and f"SUMI_REPLICA={name!r}" in line[-1] and f"`{service}`" in line[-1], err[-5000:]
    assert ("fenced in Kafka" in line[-1]) == fenced, line[-1]
