"""Load and backpressure (issue 20 item 4): many HTTP clients sending messages and creating
workflow instances at once. Every answer is a success, or 429/503 with `Retry-After` (then the
client retries with the same Idempotency-Key or instance ID, as the contract tells it to); in
the end every message and instance the clients were told was accepted is there exactly once.
Figures printed: throughput, latency, peak RSS of every process of the Host.

The issue's 200 clients x 60 s in the normal run; SUMI_LOAD_CLIENTS and SUMI_LOAD_SECONDS change them.
"""

import asyncio
import os
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx
import psutil
import pytest

from tests.conformance.kit import Api
from tests.hostkit import Host, new_space
from tests.httpkit import WORKFLOW, Users, auth

pytestmark = pytest.mark.integration

CLIENTS = int(os.environ.get("SUMI_LOAD_CLIENTS", "200"))
SECONDS = float(os.environ.get("SUMI_LOAD_SECONDS", "60"))
PEAK_RSS_BOUND = 2 * 1024**3  # bytes, per process: what a small machine can give each part
FLOW_JS = """
export default {};
export class Flow {
  async run(event, step) {
    return { ok: true };
  }
}
"""


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)
    messages: int = 0  # accepted, each once
    instances: list[str] = field(default_factory=list)

    def note(self, r: httpx.Response, took: float, wanted: set[int]) -> bool:
        """Whether `r` is final; anything but success or a Retry-After'd 429/503 is noted as wrong."""
        self.latencies.append(took)
        self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
        if r.status_code in wanted:
            return True
        if r.status_code not in (429, 503) or "retry-after" not in r.headers:
            self.unexpected.append(f"{r.status_code} {r.text[:200]}")
            return True
        return False


class Rss(threading.Thread):
    """Samples the resident memory of every process of the Host until stopped; keeps each peak."""

    def __init__(self, host: Host) -> None:
        super().__init__(daemon=True)
        self.procs = host.supervisor.procs
        self.peaks: dict[str, int] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.5):
            for name, proc in list(self.procs.items()):
                try:
                    root = psutil.Process(proc.pid)
                    for p in [root, *root.children(recursive=True)]:
                        key = name if p.pid == root.pid else f"{name}/{p.name()}"
                        self.peaks[key] = max(self.peaks.get(key, 0), p.memory_info().rss)
                except psutil.Error:
                    continue


async def client(http: httpx.AsyncClient, n: int, paths: dict[str, str], tally: Tally, end: float) -> None:
    i = 0
    while time.monotonic() < end:
        i += 1
        if i % 2:
            body, wanted, path = {"messages": [{"body": "aGk="}]}, {202}, paths["send"]
        else:
            body, wanted, path = {"id": f"load-{n}-{i}"}, {201, 409}, paths["create"]
        headers = {"Idempotency-Key": f"load-{n}-{i}-{uuid.uuid4().hex[:6]}"}
        while True:  # the same request again until it is answered for good
            started = time.monotonic()
            r = await http.post(path, json=body, headers=headers)
            if tally.note(r, time.monotonic() - started, wanted):
                break
            await asyncio.sleep(float(r.headers["retry-after"]))
        if r.status_code == 202:
            tally.messages += 1
        elif r.status_code in (201, 409) and "id" in body:
            tally.instances.append(body["id"])


async def test_many_clients_get_success_or_a_retry_after_and_nothing_accepted_is_lost(host: Host) -> None:
    # QC-52, WF-18, WF-27: accepted is durable; a bound reached is a 429/503 with Retry-After.
    space = await new_space(host)
    async with httpx.AsyncClient(base_url=host.url, timeout=120) as http:
        api = Api(http, space)
        queue = await api.queue()
        worker = await api.worker(source=FLOW_JS, handlers=())
        flow = await api.create(
            f"wf-{uuid.uuid4().hex[:8]}", WORKFLOW, {"worker": {"resourceUid": worker}, "className": "Flow"}
        )
    base = f"/v2/spaces/{space.name}"
    paths = {"send": f"{base}/queues/{queue}/messages", "create": f"{base}/workflows/{flow}/instances"}
    tally, rss = Tally(), Rss(host)
    rss.start()
    async with Users(host.url, CLIENTS, headers=auth(space.editor_token)) as users:
        started = time.monotonic()
        end = started + SECONDS
        await asyncio.gather(*(client(http, n, paths, tally, end) for n, http in enumerate(users.all)))
        took = time.monotonic() - started
        rss.stopped.set()
        http = users.all[0]
        stats = await settled(http, paths["send"].replace("/messages", "/stats"), tally.messages)
        listed = await instances(http, paths["create"])
    report(tally, took, rss.peaks)
    assert tally.unexpected == [], tally.unexpected[:5]
    assert stats["ready"] == tally.messages, stats  # no consumer: every accepted message waits, once
    assert set(tally.instances) <= listed and len(listed) == len(set(tally.instances))
    assert all(peak < PEAK_RSS_BOUND for peak in rss.peaks.values()), rss.peaks


async def settled(http: httpx.AsyncClient, path: str, expected: int) -> dict[str, int]:
    deadline = time.monotonic() + 120
    while True:
        stats: dict[str, int] = (await http.get(path)).json()
        if stats["ready"] >= expected or time.monotonic() > deadline:
            return stats
        await asyncio.sleep(0.5)


async def instances(http: httpx.AsyncClient, path: str) -> set[str]:
    ids: set[str] = set()
    cursor = None
    while True:
        page = (await http.get(path, params={"limit": 100, **({"cursor": cursor} if cursor else {})})).json()
        ids |= {item["id"] for item in page["items"]}
        if not (cursor := page["nextCursor"]):
            return ids


def report(tally: Tally, took: float, peaks: dict[str, int]) -> None:
    lat = sorted(tally.latencies)
    quantiles = statistics.quantiles(lat, n=100) if len(lat) > 1 else lat * 99
    print(
        f"\nload: {CLIENTS} clients x {SECONDS:.0f}s: {len(lat)} requests in {took:.1f}s = {len(lat) / took:.0f}/s;"
        f" accepted {tally.messages} messages, {len(set(tally.instances))} instances; statuses {tally.statuses}"
    )
    print(f"latency ms: p50 {quantiles[49] * 1000:.0f}, p95 {quantiles[94] * 1000:.0f}, p99 {quantiles[98] * 1000:.0f}")
    for name, peak in sorted(peaks.items()):
        print(f"peak RSS {name}: {peak / 1024**2:.0f} MiB")
