"""What each service of an idle Host costs. Run: python -m tests.bench.bench_idle

A whole Host (every service its own process, as `sumi up` runs them), left alone after
it is ready: the CPU each service and its runtime processes use per second of wall
time, as a share of one core, beside the target (< 1 % each: idle is idle).
Uses SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when set, else starts its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

import psutil

from tests.bench._parts import parts
from tests.bench._profile import cpu
from tests.hostkit import new_settings, running_host

SETTLE, MEASURE = 15.0, float(os.environ.get("BENCH_IDLE_SECONDS", "60"))


def services() -> dict[str, list[psutil.Process]]:
    out: dict[str, list[psutil.Process]] = {}
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmd = p.cmdline()
            if "serve" in cmd and cmd.index("serve") + 1 < len(cmd):
                out[cmd[cmd.index("serve") + 1]] = [p, *p.children(recursive=True)]
    return out


def main() -> None:
    with parts() as (kafka, db):
        with running_host(new_settings(kafka, db)):
            time.sleep(SETTLE)  # past the start's own work
            procs = services()
            before, t0 = cpu(procs), time.monotonic()
            time.sleep(MEASURE)
            elapsed = time.monotonic() - t0
            after = cpu(procs)
            shares = {n: round(100 * (after[n] - before[n]) / elapsed, 2) for n in sorted(procs)}
            print(json.dumps({"idle CPU, % of one core": shares, "seconds": round(elapsed)}), flush=True)
            print(json.dumps({"target < 1 % each": all(v < 1.0 for v in shares.values())}), flush=True)


if __name__ == "__main__":
    main()
