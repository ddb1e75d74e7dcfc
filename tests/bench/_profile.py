"""Profiles of the Host's Python services while a benchmark runs (BENCH_PROFILE=1).

py-spy samples each service's main process from outside (no code of the service
changes, nothing slows it but the sampling) and writes collapsed stacks; the summary
prints, per service, the functions that held the most samples themselves (self) and
with what they called (total), so a closing note can say where the time goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

WANTED = os.environ.get("BENCH_PROFILE", "") not in ("", "0")


def _spy() -> str | None:
    here = Path(sys.executable).parent / "py-spy"
    return str(here) if here.exists() else shutil.which("py-spy")


@contextlib.contextmanager
def profiled(parts: dict[str, list[psutil.Process]], label: str = "", top: int = 12) -> Iterator[None]:
    """Samples the first process of every part that runs Python while the block runs; `label`
    names the run in what it prints."""
    spy = _spy()
    if not WANTED or spy is None:
        if WANTED:
            print(json.dumps({"profile": "py-spy not found; pip install py-spy"}), flush=True)
        yield
        return
    out = Path(tempfile.mkdtemp(prefix="sumi-profile-"))
    running: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name, procs in parts.items():
        if not procs or name in ("kafka", "postgres") or name.endswith(" runtimes"):  # not Python
            continue
        file = out / f"{name.replace(' ', '-')}.txt"
        cmd = [spy, "record", "--nonblocking", "-r", "200", "-f", "raw", "-o", str(file), "-p", str(procs[0].pid)]
        running[name] = (subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), file)
    try:
        yield
    finally:
        for proc, _ in running.values():
            proc.send_signal(2)  # py-spy writes its file on SIGINT
        for name, (proc, file) in running.items():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            if file.exists():
                print(json.dumps({"profile": f"{name} {label}".strip(), **summary(file, top)}), flush=True)
        print(json.dumps({"profile files": str(out)}), flush=True)


def _frame(raw: str) -> str:
    """`function (path/to/file.py:12)` -> `function file.py`: one name per function, not per line."""
    name, _, where = raw.partition(" (")
    return f"{name} {where.rsplit(':', 1)[0].rsplit('/', 1)[-1]}"


def summary(file: Path, top: int) -> dict[str, object]:
    """Self and total shares of the busiest frames, idle (waiting in the selector) apart."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = idle = 0
    for line in file.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";")]
        if frames and ("select " in frames[-1] or "poll " in frames[-1] or "epoll" in frames[-1]):
            idle += n
            continue
        samples += n
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    busy = max(samples, 1)
    return {
        "busy samples": samples,
        "idle samples": idle,
        "self %": {f: round(100 * n / busy, 1) for f, n in own.most_common(top)},
        "total %": {f: round(100 * n / busy, 1) for f, n in total.most_common(top + 8)},
    }


def processes(host: Any) -> dict[str, list[psutil.Process]]:
    """Each service by name, the runtimes it started apart; the broker and PostgreSQL; this client."""
    out: dict[str, list[psutil.Process]] = {"bench client": [psutil.Process()]}
    mine = psutil.Process().children(recursive=True)
    for p in mine:
        with contextlib.suppress(psutil.Error):
            cmd = p.cmdline()
            if "serve" in cmd and cmd.index("serve") + 1 < len(cmd):
                name = cmd[cmd.index("serve") + 1]
                out.setdefault(name, []).append(p)
                if kids := p.children(recursive=True):  # the worker runtimes it started
                    out.setdefault(f"{name} runtimes", []).extend(kids)
    for part in ("kafka", "postgres"):
        # The ones this run started: other brokers and databases on a shared machine are not
        # this run's cost; any on the machine when the run uses ones it did not start.
        out[part] = [p for p in mine if _part(p) == part] or [p for p in psutil.process_iter() if _part(p) == part]
    return out


def _part(p: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        if p.name() == "java" and "kafka" in " ".join(p.cmdline()):
            return "kafka"
        parent = p.parent()
        if p.name().startswith("postgres") and not (parent and parent.name().startswith("postgres")):
            return "postgres"  # the postmaster: its backends come and go, so counted through it
    return ""


def _used(p: psutil.Process, tree: bool) -> float:
    """CPU seconds of a process, and with `tree` of every process it started, gone ones too."""
    t = p.cpu_times()
    if not tree:
        return t.user + t.system
    total = t.user + t.system + t.children_user + t.children_system
    for kid in p.children():
        with contextlib.suppress(psutil.Error):
            total += _used(kid, True)
    return total


def cpu(parts: dict[str, list[psutil.Process]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, procs in parts.items():
        total = 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                total += _used(p, name == "postgres")
        out[name] = total
    return out


@contextlib.contextmanager
def cpu_seconds(parts: dict[str, list[psutil.Process]], label: str) -> Iterator[dict[str, float]]:
    """Prints the CPU seconds each part used while the block ran, beside the block's wall seconds;
    the dict it yields holds them, unrounded, once the block has run."""
    used: dict[str, float] = {}
    before, t0 = cpu(parts), time.perf_counter()
    yield used
    after, elapsed = cpu(parts), time.perf_counter() - t0
    used.update({k: after[k] - before[k] for k in after})
    seconds = {k: round(v, 1) for k, v in used.items()}
    print(json.dumps({f"{label} cpu seconds": seconds, "wall seconds": round(elapsed, 1)}), flush=True)
