"""SIGKILL of every process of the Host at once, then `sumi up` again (issue 20 item 0b): nothing
that was answered as accepted is lost, and `sumi replay` equals the live read models.

What a power cut does is not tested here (README "What an answer promises"): this is every
process gone in the same instant, the page cache and the disks left as they are.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
import psutil

from tests.integration.test_up_lifecycle import Up, create_queue, up, workdir

__all__ = ["up", "workdir"]  # the fixtures this module's tests take, imported with their kit

BATCH = 5


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


def test_sigkill_of_every_process_then_up_loses_nothing_accepted_and_replay_equals_live(
    up: Callable[..., Up],
) -> None:
    # QC-43, QC-48: what was accepted is in the log, and the read models are the log's fold.
    host = up()
    host.wait_line("sumi: ready in")
    token = host.output().split("sumi: admin token ", 1)[1].split()[0]
    with httpx.Client(base_url=host.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        assert http.post("/v2/spaces", json={"name": "all"}).status_code == 201
        queue = create_queue(http, "all")
    sender = Sender(host.url, token, queue)
    sender.start()
    deadline = time.monotonic() + 120
    while len(sender.accepted) < 20 * BATCH:  # killed in the middle of steady sending
        assert time.monotonic() < deadline, "sends were not accepted"
        time.sleep(0.05)
    host.remember()
    everything = [psutil.Process(host.proc.pid), *host.processes()]
    for p in everything:
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
