"""Runs the Host's services as child processes, restarts any that dies, stops them all.

Each service is its own process (`sumi serve NAME`), so any one can be killed
and restarted alone: that is how `sumi up` runs and how the crash tests hit it.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import httpx

from sumi._lifeline import ENV
from sumi.core.config import Settings
from sumi.services import SERVICE_ENTRIES


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
# own bounds (sumi._lifeline.STOP_GRACE) a whole stop stays under 30 s.
GATEWAY_GRACE = 4.0
PROCESSORS_GRACE = 8.0


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        env: dict[str, str] | None = None,
        services: tuple[str, ...] | None = None,
        restart: bool = True,
    ) -> None:
        self.settings = settings
        self.env = {**os.environ, **settings.to_env(), **(env or {}), ENV: "stdin"}
        self.services = services or available_services()
        self.restart = restart
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = False
        self._lock = threading.Lock()  # a restart never races the stop
        self.held: set[str] = set()
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
                start_new_session=True,
            )

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        _stop_all([proc], PROCESSORS_GRACE, signalled=True)

    def hold(self, name: str) -> None:
        """Stop a service and keep it down until `release` (an outage, for tests and operators)."""
        self.held.add(name)
        self.kill(name, signal.SIGTERM)

    def release(self, name: str) -> None:
        self.held.discard(name)

    def _watch(self) -> None:
        while not self._stopping:
            for name, proc in list(self.procs.items()):
                if proc.poll() is not None and not self._stopping and name not in self.held:
                    print(f"sumi: {name} exited ({proc.returncode}); restarting", file=sys.stderr)
                    _kill_group(proc)  # the runtime processes it started go with it
                    time.sleep(0.5)
                    self.start_service(name)
            time.sleep(0.2)

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
        _stop_all(gateway, GATEWAY_GRACE)
        _stop_all([p for n, p in self.procs.items() if n != "gateway"], PROCESSORS_GRACE)


def _stop_all(procs: list["subprocess.Popen[bytes]"], grace: float, signalled: bool = False) -> None:
    """SIGTERM each (unless `signalled` already), SIGKILL what has not exited within `grace`."""
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
