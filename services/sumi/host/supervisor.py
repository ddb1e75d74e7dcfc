"""Runs the Host's services as child processes, restarts any that dies, stops them all.

Each service is its own process (`sumi serve NAME`), so any one can be killed
and restarted alone: that is how `sumi up` runs and how the crash tests hit it.
The broker and the database that `sumi up` launched itself (its "parts") are
watched the same way, and probed too: one that dies, or stops answering its own
protocol for PART_PATIENCE seconds (a SIGSTOP, a wedged JVM), is restarted on its
data directory. Every restart waits an exponential backoff (sumi.core.backoff),
so a dependency that stays down costs a line now and then, not a restart loop.
"""

import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from sumi.core.backoff import Backoff
from sumi.core.config import Settings
from sumi.host.services import SERVICE_ENTRIES
from sumi.infra import Watched
from sumi.infra.lifeline import ENV


def available_services() -> tuple[str, ...]:
    """Every service whose module this installation has (later issues add more)."""
    import importlib.util

    found = []
    for name, module in SERVICE_ENTRIES.items():
        try:
            if importlib.util.find_spec(module) is not None:
                found.append(name)
        except ModuleNotFoundError:
            pass
    return tuple(found)


# The gateway stops first (no new work) and briefly; the processors then get
# longer to finish their transactions. With the broker's and the database's
# own bounds (sumi.infra.lifeline.STOP_GRACE) a whole stop stays under 30 s.
GATEWAY_GRACE = 4.0
PROCESSORS_GRACE = 8.0
PROBE_EVERY = 2.0  # seconds between two probes of a part
PART_PATIENCE = 15.0  # seconds a running part may fail its probes before it is restarted
PART_START = 120.0  # seconds a relaunched part may take to answer at all


@dataclass
class _Watch:
    """What the watcher knows of one supervised thing: when it started, when its restart is due."""

    started: float = field(default_factory=time.monotonic)
    backoff: Backoff = field(default_factory=Backoff)
    due: float | None = None
    failing_since: float | None = None  # the first failed probe of a run of them
    answered: bool = False  # since its last launch: a part still starting is not wedged

    def schedule(self, now: float) -> float:
        wait = self.backoff.after_failure(now - self.started)
        self.due = now + wait
        return wait

    def restarted(self, now: float) -> None:
        self.started, self.due, self.failing_since, self.answered = now, None, None, False


def supervised_name(settings: Settings) -> str:
    """The replica name of `sumi up`'s services: this machine's and state directory's own, so
    another Host sharing the Kafka and Postgres (a copy of these settings elsewhere) names its
    replicas otherwise, and a restart of this one takes its partitions straight back. A name
    taken all the same (SUMI_REPLICA copied from a running service) is refused (sumi.host.replica)."""
    where = f"{socket.gethostname()}:{Path(settings.state_dir).resolve()}"
    return "up-" + hashlib.sha256(where.encode()).hexdigest()[:10]


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        env: dict[str, str] | None = None,
        services: tuple[str, ...] | None = None,
        restart: bool = True,
        parts: Sequence[Watched] = (),
        stderr: IO[bytes] | None = None,
    ) -> None:
        self.settings = settings
        self.stderr = stderr  # where the services write their logs: ours unless given
        # One replica of each service, restarted under the same name (Settings.replica).
        named = {"SUMI_REPLICA": settings.replica or supervised_name(settings)}
        self.env = {**os.environ, **settings.to_env(), **named, **(env or {}), ENV: "stdin"}
        self.services = services or available_services()
        self.restart = restart
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = False
        self._lock = threading.Lock()  # a restart never races the stop
        self.held: set[str] = set()
        self.parts = {type(p).__name__: p for p in parts}
        self.restarts: dict[str, int] = {}  # by service or part name: how often it was restarted
        self._watches: dict[str, _Watch] = {}
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.settings.http_host}:{self.settings.http_port}"

    def start(self) -> "Supervisor":
        for name in self.services:
            self.start_service(name)
        if self.restart:
            self._watcher = threading.Thread(target=self._watch, daemon=True)
            self._watcher.start()
            if self.parts:
                threading.Thread(target=self._watch_parts, daemon=True).start()
        return self

    def start_service(self, name: str) -> None:
        # Its own session (terminal signals reach `sumi up` only, which stops things in
        # order), and a lifeline on stdin: the service kills its group when we are gone.
        with self._lock:
            if self._stopping:
                return
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "sumi.cli", "serve", name],
                env=self.env,
                stdin=subprocess.PIPE,
                stderr=self.stderr,
                start_new_session=True,
            )
            self._watches[name] = _Watch()

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        stop_all([proc], PROCESSORS_GRACE, signalled=True)

    def hold(self, name: str) -> None:
        """Stop a service and keep it down until `release` (an outage, for tests and operators)."""
        self.held.add(name)
        self.kill(name, signal.SIGTERM)

    def release(self, name: str) -> None:
        self.held.discard(name)

    def _watch(self) -> None:
        while not self._stopping:
            now = time.monotonic()
            for name, proc in list(self.procs.items()):
                if proc.poll() is None or self._stopping or name in self.held:
                    continue
                watch = self._watches[name]
                if watch.due is None:
                    wait = watch.schedule(now)
                    _say(f"{name} exited ({proc.returncode}); restarting in {wait:.1f}s")
                    _kill_group(proc)  # the runtime processes it started go with it
                elif now >= watch.due:
                    self.restarts[name] = self.restarts.get(name, 0) + 1
                    self.start_service(name)
            time.sleep(0.2)

    def _watch_parts(self) -> None:
        self._watches.update({name: _Watch() for name in self.parts})
        while not self._stopping:
            for name, part in self.parts.items():
                self._check_part(name, part, self._watches[name])
            time.sleep(PROBE_EVERY)

    def _check_part(self, name: str, part: Watched, watch: _Watch) -> None:
        now = time.monotonic()
        if watch.due is None:
            problem = _part_problem(part, watch, now)
            if problem is not None:
                _say(f"{name} {problem}; restarting in {watch.schedule(now):.1f}s")
        elif now >= watch.due:
            with self._lock:  # a stop waits for a relaunch under way, and none starts after it
                if self._stopping:
                    return
                part.relaunch()
            self.restarts[name] = self.restarts.get(name, 0) + 1
            watch.restarted(time.monotonic())

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.url}/readyz not green after {timeout}s")

    def stop(self) -> None:
        """Gateway first (no new work), then the processors; each step bounded."""
        with self._lock:
            self._stopping = True
        gateway = [p for n, p in self.procs.items() if n == "gateway"]
        stop_all(gateway, GATEWAY_GRACE)
        stop_all([p for n, p in self.procs.items() if n != "gateway"], PROCESSORS_GRACE)


def _part_problem(part: Watched, watch: _Watch, now: float) -> str | None:
    """Why a part needs a restart now, or None: it died, or it stopped answering for too long."""
    if not part.running():
        return "exited"
    if part.healthy():
        watch.failing_since, watch.answered = None, True
        return None
    if not watch.answered:  # still starting, unless for much longer than any start takes
        return f"did not answer within {PART_START:.0f}s of its start" if now - watch.started > PART_START else None
    watch.failing_since = watch.failing_since or now
    if now - watch.failing_since >= PART_PATIENCE:
        return f"has not answered for {now - watch.failing_since:.0f}s"
    return None


def _say(line: str) -> None:
    print(f"sumi: {line}", file=sys.stderr, flush=True)


def stop_all(procs: list["subprocess.Popen[bytes]"], grace: float, signalled: bool = False) -> None:
    """SIGTERM each (unless `signalled` already), SIGKILL what has not exited within `grace`, then
    what is left of each one's process group (its runtime processes)."""
    for proc in procs:
        if proc.poll() is None and not signalled:
            proc.terminate()
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _kill_group(proc)
        if proc.stdin is not None:
            proc.stdin.close()


def _kill_group(proc: "subprocess.Popen[bytes]") -> None:
    """Kill what is left of a stopped service's process group (its runtime processes)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
