"""The embedded Host through its own parts dying (issue 20 items 0 and 0b), on the real `sumi up`:

- its broker and then its database SIGKILLed under it come back by themselves (nobody restarts
  anything) and sends are accepted and counted again; from the first start on, no
  NotEnoughReplicas on the single-node broker;
- then SIGKILL of every process of the Host at once, and `sumi up` again: nothing that was
  answered as accepted is lost, and `sumi replay` equals the live read models.

What a power cut does is not tested here (README "What an answer promises"): this is every
process gone in the same instant, the page cache and the disks left as they are.
"""

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
import psutil
import pytest

from tests.integration.test_up_lifecycle import Up, create_queue, role, up, workdir

pytestmark = pytest.mark.integration

__all__ = ["up", "workdir"]  # the fixtures this module's tests take, imported with their kit

BATCH = 5
HEALED_WITHIN = 180.0  # a loaded 2-core machine restarts a JVM broker slowly; the point is that it does


class Sender(threading.Thread):
    """Sends batches until stopped; keeps the message IDs of every batch answered 202."""

    def __init__(self, url: str, token: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        self.path = f"/v2/spaces/all/queues/{queue}/messages"
        self.accepted: list[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopped.is_set():
            n += 1
            body = {"messages": [{"body": "aGk="}] * BATCH}
            try:
                r = self.http.post(self.path, json=body, headers={"Idempotency-Key": f"all-{n}"})
            except httpx.HTTPError:
                continue
            if r.status_code == 202:
                self.accepted += r.json()["messageIds"]


def test_parts_killed_come_back_and_a_kill_of_everything_then_up_loses_nothing_accepted(
    up: Callable[..., Up],
) -> None:
    # QC-43, QC-48: what was accepted is in the log, and the read models are the log's fold.
    host = up()
    host.wait_line("sumi: ready in")
    token = host.output().split("sumi: admin token ", 1)[1].split()[0]
    with httpx.Client(base_url=host.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        assert http.post("/v2/spaces", json={"name": "all"}).status_code == 201
        queue = create_queue(http, "all")
        healed = send_until_accepted(http, queue, 0)
        assert "NotEnoughReplicas" not in host.output(), host.output()
        for part, exited in (("broker", "KafkaBroker exited"), ("database", "PostgresServer exited")):
            kill_part(host, part)
            host.wait_line(exited)
            healed = send_until_accepted(http, queue, healed)
            wait_ready_count(http, queue, healed)
    out = host.output()
    assert out.count(token) == 1, "the admin token is printed once, at the start, and logged nowhere else"
    print(f"restarts: {restart_counts(out)}")
    # Backoff, not a restart loop: two outages of some seconds each allow a few tries, never dozens.
    assert all(n <= 8 for n in restart_counts(out).values()), out
    sender = Sender(host.url, token, queue)
    sender.start()
    deadline = time.monotonic() + 120
    while len(sender.accepted) < 20 * BATCH:  # killed in the middle of steady sending
        assert time.monotonic() < deadline, "sends were not accepted"
        time.sleep(0.05)
    host.remember()
    everything = [psutil.Process(host.proc.pid), *host.processes()]
    for p in everything:
        with contextlib.suppress(psutil.NoSuchProcess):  # a short-lived child may end meanwhile
            p.send_signal(signal.SIGKILL)
    psutil.wait_procs(everything, timeout=10)
    sender.stopped.set()
    sender.join(15)
    accepted = set(sender.accepted)
    print(f"accepted before the kill: {len(accepted)} messages")

    again = up(state=host.state)
    again.wait_line("sumi: ready in")
    with httpx.Client(base_url=again.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        # A send answered 503 or cut off may have been appended too (its outcome unknown): at least these.
        deadline = time.monotonic() + 180
        kept: set[str] = set()
        while not accepted <= kept and time.monotonic() < deadline:
            time.sleep(0.5)  # the projections may still be catching up with the log
            r = http.get(f"/v2/spaces/all/queues/{queue}/messages", params={"limit": 1000})
            if r.status_code == 200:
                kept = {m["id"] for m in r.json()["items"]}
    assert accepted <= kept, f"lost {len(accepted - kept)} accepted messages"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMI_")}
    env.update(
        SUMI_KAFKA_BOOTSTRAP=f"127.0.0.1:{again.ports['SUMI_KAFKA_PORT']}",
        SUMI_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{again.ports['SUMI_PG_PORT']}/postgres",
    )
    audit = subprocess.run(
        [sys.executable, "-m", "sumi.cli", "replay"], env=env, capture_output=True, text=True, timeout=300
    )
    assert audit.returncode == 0 and "replay: identical" in audit.stdout, audit.stdout + audit.stderr
    print(f"after sumi up: {len(kept)} kept (accepted {len(accepted)}); {audit.stdout.strip().splitlines()[-1]}")


def kill_part(host: Up, part: str) -> None:
    """SIGKILL the broker's JVM or the postmaster (not their watchdogs): what the OOM killer does."""
    found = [p for p in host.processes() if role(p) == part]
    main = [p for p in found if not any(q.pid == p.ppid() for q in found)]  # the postmaster, not its backends
    assert len(main) == 1, found
    main[0].send_signal(signal.SIGKILL)
    psutil.wait_procs(main, timeout=10)


def send_until_accepted(http: httpx.Client, queue: str, accepted: int) -> int:
    """Send one message, again and again with the same Idempotency-Key while the Host says it cannot
    yet (503, nothing known to have happened): the client's part of "nothing lost, nothing twice"."""
    deadline = time.monotonic() + HEALED_WITHIN
    key = {"Idempotency-Key": f"heal-{accepted}"}
    while True:
        try:
            r = http.post(f"/v2/spaces/all/queues/{queue}/messages", json={"messages": [{"body": "aGk="}]}, headers=key)
            if r.status_code == 202:
                return accepted + 1
            assert r.status_code == 503, r.text
        except httpx.TransportError:
            pass  # the gateway itself may be restarting
        assert time.monotonic() < deadline, "sends were not accepted again"
        time.sleep(0.5)


def wait_ready_count(http: httpx.Client, queue: str, expected: int) -> None:
    # No consumer is attached: every accepted message stays ready, so the count is exact.
    deadline = time.monotonic() + HEALED_WITHIN
    seen = None
    while time.monotonic() < deadline:
        try:
            r = http.get(f"/v2/spaces/all/queues/{queue}/stats")
            if r.status_code == 200:
                seen = r.json()
                if seen["ready"] == expected:
                    return
                assert seen["ready"] < expected, seen
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"stats never showed {expected} ready: {seen}")


def restart_counts(out: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in re.findall(r"sumi: (\S+) (?:exited|has not answered|did not answer)[^\n]*restarting in", out):
        counts[name] = counts.get(name, 0) + 1
    return counts
