"""`sumi up` heals its own embedded parts (issue 20 item 0): the real command, its broker and its
database SIGKILLed under it, and nobody restarting anything by hand.

Also the first start's quiet (issue 19, 20): from the first `sumi up` through a new Space, a
queue and a send, no NotEnoughReplicas on a single-node broker.
"""

import re
import signal
import time
from collections.abc import Callable

import httpx
import psutil

from tests.integration.test_up_lifecycle import Up, create_queue, role, up, workdir

__all__ = ["up", "workdir"]  # the fixtures this module's tests take, imported with their kit

HEALED_WITHIN = 180.0  # a loaded 2-core machine restarts a JVM broker slowly; the point is that it does


def test_a_killed_broker_and_a_killed_database_come_back_by_themselves_and_nothing_accepted_is_lost(
    up: Callable[..., Up],
) -> None:
    # QC-43, QC-48: the Host recovers from its parts' restarts; no person restarts it.
    host = up()
    host.wait_line("sumi: ready in")
    token = host.output().split("sumi: admin token ", 1)[1].split()[0]
    with httpx.Client(base_url=host.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        assert http.post("/v2/spaces", json={"name": "heal"}).status_code == 201
        queue = create_queue(http, "heal")
        accepted = send_until_accepted(http, queue, 0)
        quiet = host.output()
        assert "NotEnoughReplicas" not in quiet, quiet
        for part, exited in (("broker", "KafkaBroker exited"), ("database", "PostgresServer exited")):
            kill_part(host, part)
            host.wait_line(exited)
            accepted = send_until_accepted(http, queue, accepted)
            wait_ready_count(http, queue, accepted)
    out = host.output()
    print(f"restarts: {restart_counts(out)}")
    # Backoff, not a restart loop: two outages of some seconds each allow a few tries, never dozens.
    assert all(n <= 8 for n in restart_counts(out).values()), out
    assert out.count("Traceback") <= 12, out


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
            r = http.post(
                f"/v2/spaces/heal/queues/{queue}/messages", json={"messages": [{"body": "aGk="}]}, headers=key
            )
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
            r = http.get(f"/v2/spaces/heal/queues/{queue}/stats")
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
