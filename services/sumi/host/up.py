"""`sumi up`: the broker, the database and every service on this machine, and nothing left after.

The order of things is the point of this module:
- stop signals are handled before anything starts (sumi.host.signals), so a stop at
  any moment of start-up undoes what was started;
- one Host per state directory: a lock held while `up` runs;
- every port checked before anything starts, so a port held by someone else is an
  error, never a "ready" against someone else's gateway;
- every child holds a lifeline to this process (sumi.infra.lifeline), so whatever kills
  `up` kills them too;
- the broker and the database it launched are the supervisor's to watch and restart
  once everything has started, and stay this module's to stop;
- stop in order: gateway, processors (the supervisor), then database and broker.
"""

import dataclasses
import fcntl
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sumi.core.config import Settings
from sumi.host.signals import Stopped, StopSignals
from sumi.infra import KafkaBroker, KafkaCluster, PostgresServer, port_taken

Part = KafkaBroker | KafkaCluster | PostgresServer

if TYPE_CHECKING:
    from sumi.host._uplogs import HostLogPrinter


class HostRunning(Exception):
    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


class StateLock:
    """An exclusive flock on STATE/lock holding the holder's pid.

    The kernel drops a flock when its holder dies however it dies, so a stale
    lock (the file of a Host that is gone) is simply taken over. The descriptor
    is close-on-exec: no child keeps the lock alive.
    """

    def __init__(self, state: Path) -> None:
        self.path = state / "lock"
        self._fd: int | None = None

    def acquire(self) -> "StateLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise HostRunning(holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def say(line: str) -> None:
    # After SIGHUP the terminal is gone and writing to it fails: the stop must go on regardless.
    try:
        print(line, flush=True)
    except OSError:
        pass


def up(first: Settings, logs: bool = False) -> int:
    """`first`: the settings as the operator gave them (read once, by the CLI)."""
    signals = StopSignals().install()
    started = time.monotonic()
    state = Path(first.state_dir).resolve()
    try:
        lock = StateLock(state).acquire()
    except HostRunning as e:
        say(f"sumi: a Host is already running on {state} (pid {e.pid}); stop it first or set SUMI_STATE_DIR")
        return 1
    try:
        return _up(first, state, signals, started, logs)
    except Stopped:
        return 0
    finally:
        lock.release()


def _ports(settings: Settings) -> dict[str, int] | str:
    """The ports `up` will listen on, by variable, or what is wrong with them."""
    ports = {"SUMI_HTTP_PORT": settings.http_port}
    if settings.launch_kafka:
        ports["SUMI_KAFKA_PORT"] = settings.kafka_port
    if settings.launch_postgres:
        ports["SUMI_PG_PORT"] = settings.pg_port
    if settings.launch_kafka:  # a local cluster's brokers listen on the ports after the first
        ports.update({f"SUMI_KAFKA_PORT+{i}": settings.kafka_port + i for i in range(1, settings.kafka_brokers)})
    for var, port in ports.items():
        if port_taken(port, settings.http_host if var == "SUMI_HTTP_PORT" else "127.0.0.1"):
            return f"port {port} ({var}) is already in use by another process; nothing was started"
    return ports


def _up(first: Settings, state: Path, signals: StopSignals, started: float, logs: bool = False) -> int:
    from sumi.host.bootstrap import admin_token, issue_admin_token, prepare
    from sumi.host.supervisor import Supervisor

    brokers = first.kafka_brokers
    ports = _ports(first)
    if isinstance(ports, str):
        say(f"sumi: {ports}")
        return 1
    parts: list[Part] = []
    supervisor: Supervisor | None = None
    env: dict[str, str] = {}
    try:
        # Both launched before either is waited for: the JVM boots while PostgreSQL starts.
        if "SUMI_KAFKA_PORT" in ports:
            kafka = _kafka(state, ports["SUMI_KAFKA_PORT"], brokers, first.cache_dir, first.kafka_jvm.split())
            _launch(parts, kafka, f"Apache Kafka (KRaft, {'single node' if brokers == 1 else f'{brokers} brokers'})")
            env["SUMI_KAFKA_BOOTSTRAP"] = kafka.bootstrap
        if "SUMI_PG_PORT" in ports:
            pg = PostgresServer(state / "postgres", port=ports["SUMI_PG_PORT"])
            _launch(parts, pg, "PostgreSQL")
            env["SUMI_DATABASE_URL"] = pg.url
        for part in parts:
            part.wait_started()
        # The parts it started, handed to its children through `env` and to itself here.
        settings = dataclasses.replace(
            first,
            kafka_bootstrap=env.get("SUMI_KAFKA_BOOTSTRAP", first.kafka_bootstrap),
            database_url=env.get("SUMI_DATABASE_URL", first.database_url),
        )
        signals.run(prepare(settings))
        token, new = admin_token(
            settings, settings.admin_token or None, Path(settings.admin_token_file or state / "admin-token")
        )
        # Watched and restarted like the services; a cluster's brokers each on their own.
        watched = [b for part in parts for b in (part.brokers if isinstance(part, KafkaCluster) else [part])]
        supervisor = Supervisor(settings, env, parts=watched)
        supervisor.start()
        signals.run(issue_admin_token(settings, token))
        supervisor.wait_ready()
        say(f"sumi: ready in {time.monotonic() - started:.1f}s at {supervisor.url}")
        say(f"sumi: admin token {token}" + (" (new; also written to the token file)" if new else ""))
        say("sumi: Ctrl-C stops everything")
        printer = _print_logs(settings) if logs else None
        signals.wait()
        if printer is not None:
            printer.stop()
    except (RuntimeError, TimeoutError) as e:
        say(f"sumi: {e}")
        return 1
    finally:
        signals.received = signals.received or -1  # from here on a signal does not interrupt the stop
        stopping = time.monotonic()
        say("sumi: stopping…")
        if supervisor is not None:
            supervisor.stop()
        services = time.monotonic()
        for part in parts:
            part.terminate()
        for part in parts:
            part.stop()
        done = time.monotonic()
        say(
            f"sumi: stopped in {done - stopping:.1f}s"
            f" (services {services - stopping:.1f}s, parts {done - services:.1f}s)"
        )
    return 0


def _kafka(
    state: Path, port: int, brokers: int, cache: str = "", jvm: Sequence[str] = ()
) -> KafkaBroker | KafkaCluster:
    if brokers == 1:
        return KafkaBroker(state / "kafka", port=port, cache=cache, jvm=jvm)
    ports = range(port, port + brokers)
    return KafkaCluster(state / "kafka-cluster", ports=ports, size=brokers, cache=cache, jvm=jvm)


def _print_logs(settings: Settings) -> "HostLogPrinter":
    from sumi.host._uplogs import HostLogPrinter

    return HostLogPrinter(settings).start()


def _launch(parts: list[Part], part: Part, what: str) -> None:
    say(f"sumi: starting {what}…")
    parts.append(part)  # before it starts: a stop in the middle of starting it still stops it
    part.launch()
