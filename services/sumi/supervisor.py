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

from sumi.core.config import Settings


def available_services() -> tuple[str, ...]:
    """Every service whose module this installation has (later issues add more)."""
    import importlib.util

    from sumi.cli import SERVICE_ENTRIES

    found = []
    for name, module in SERVICE_ENTRIES.items():
        try:
            if importlib.util.find_spec(module) is not None:
                found.append(name)
        except ModuleNotFoundError:
            pass
    return tuple(found)


class Supervisor:
    def __init__(
        self,
        settings: Settings,
        env: dict[str, str] | None = None,
        services: tuple[str, ...] | None = None,
        restart: bool = True,
    ) -> None:
        self.settings = settings
        self.env = {**os.environ, **settings.to_env(), **(env or {})}
        self.services = services or available_services()
        self.restart = restart
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._stopping = False
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
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "sumi.cli", "serve", name], env=self.env, start_new_session=True
        )

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[name]
        proc.send_signal(sig)
        proc.wait()

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
        self._stopping = True
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
