"""What each service of an idle Host costs. Run: python -m tests.bench.bench_idle

A whole Host (every service its own process, as `sumi up` runs them, on its default partition
count), with the README's five-minute tour applied and run to its end (two queues, a
QueueConsumer with a DLQ, a DurableWorkflow and one instance of it, complete), then left
alone: the CPU each service and its runtime processes use per second of wall time, as a
share of one core, beside the targets (idle is idle: < 0.5 % each Python service, < 3 % the
whole Host, the broker's JVM and PostgreSQL included). The whole-Host figure is the one a
newcomer sees after the tour; the broker and PostgreSQL count only when this run started them.
Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil

from sumi.core.config import Settings
from sumi.testing import new_space
from tests.bench._parts import parts
from tests.bench._profile import cpu, processes
from tests.hostkit import Host, new_settings, running_host

SETTLE, MEASURE = 15.0, float(os.environ.get("BENCH_IDLE_SECONDS", "60"))
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SERVICE, HOST = 0.5, 3.0  # % of one core
THREADS = os.environ.get("BENCH_IDLE_THREADS", "") not in ("", "0")  # where each process's idle goes


def tour(host: Host) -> None:
    """The README's five-minute tour, to its last line's answer."""
    space = new_space(host)
    try:
        space.apply(EXAMPLES / "queue-js" / "sumi.yaml")
        space.send("orders", "ok:1", "fail:2")
        space.wait_stats("orders", acknowledged=1, deadLettered=1)
        space.apply(EXAMPLES / "workflow-js" / "sumi.yaml")
        space.start("order-js", {"qty": 2}, id="o-1")
        space.event("order-js", "o-1", "approved", {"by": "me"})
        done = space.wait_instance("order-js", "o-1", timeout=60)
        assert done["status"] == "complete", done
    finally:
        space.close()


def ours(found: dict[str, list[psutil.Process]], external: dict[str, bool]) -> dict[str, list[psutil.Process]]:
    """This run's processes only: other Hosts' brokers and databases on the machine are not ours."""
    mine = {p.pid for p in psutil.Process().children(recursive=True)}
    out = {
        n: [p for p in ps if p.pid in mine] for n, ps in found.items() if n != "bench client" and not external.get(n)
    }
    return {n: ps for n, ps in out.items() if ps}


def threads(procs: dict[str, list[psutil.Process]]) -> dict[str, float]:
    """CPU seconds so far of every thread of the broker and the runtimes, by `part/thread name`
    (the JVM and Node name their threads: which of them wakes is what an idle cut aims at)."""
    out: dict[str, float] = {}
    for name, ps in procs.items():
        if name != "kafka" and not name.endswith(" runtimes"):
            continue
        for p in ps:
            try:
                for t in p.threads():
                    comm = Path(f"/proc/{p.pid}/task/{t.id}/comm").read_text().strip()
                    key = f"{name}/{comm}"
                    out[key] = out.get(key, 0.0) + t.user_time + t.system_time
            except (psutil.Error, OSError):
                continue
    return out


def main() -> None:
    external = {
        "kafka": bool(os.environ.get("SUMI_KAFKA_BOOTSTRAP")),
        "postgres": bool(os.environ.get("SUMI_DATABASE_URL")),
    }
    with parts() as (kafka, db):
        with running_host(new_settings(kafka, db, partitions=Settings.partitions)) as host:
            tour(host)
            time.sleep(SETTLE)  # past the tour's own work (snapshots, quiet timers)
            procs = ours(processes(host), external)
            before, t0, tb = cpu(procs), time.monotonic(), threads(procs) if THREADS else {}
            time.sleep(MEASURE)
            elapsed = time.monotonic() - t0
            after, ta = cpu(procs), threads(procs) if THREADS else {}
    if THREADS:
        spent = {k: round(100 * (v - tb.get(k, 0.0)) / elapsed, 3) for k, v in ta.items()}
        busiest = dict(sorted(((k, v) for k, v in spent.items() if v > 0), key=lambda kv: -kv[1])[:25])
        print(json.dumps({"busiest threads, % of one core": busiest}), flush=True)
    shares = {n: round(100 * (after[n] - before[n]) / elapsed, 2) for n in sorted(procs)}
    python = {n: v for n, v in shares.items() if n not in ("kafka", "postgres") and not n.endswith(" runtimes")}
    whole = round(sum(shares.values()), 2)
    print(json.dumps({"idle CPU after the tour, % of one core": shares, "seconds": round(elapsed)}), flush=True)
    print(json.dumps({"whole Host (what a newcomer sees), %": whole}), flush=True)
    print(
        json.dumps(
            {
                f"each Python service < {SERVICE} %": all(v < SERVICE for v in python.values()),
                f"whole Host < {HOST} %": whole < HOST,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
