"""Children die with their parent, whatever kills the parent.

The lifeline is a pipe: the parent starts a child with ``stdin=PIPE`` and never
writes to it; the child reads its stdin and, on end of file, knows the parent
is gone. The kernel closes the parent's end however the parent dies (exit,
SIGKILL, the OOM killer), and the end is close-on-exec in the parent, so no
sibling keeps it open. This works on every POSIX system.

On Linux, the kernel's parent-death signal (``PR_SET_PDEATHSIG``) is a second
line for processes we start from a single-threaded parent (the watchdog's
child). It is not used for the services: it fires when the parent *thread*
exits, and the supervisor restarts services from a watcher thread.

The JVM and postgres cannot be made to watch a pipe, so each runs under a tiny
watchdog (``python -m sumi.infra.lifeline``) that holds the lifeline for them: on
end of file or on SIGTERM/SIGINT/SIGHUP it asks its child to stop (SIGTERM for
the broker, SIGINT, PostgreSQL's "fast" shutdown, for the database), waits a
bounded time, then kills the child's whole process group.
"""

import argparse
import ctypes
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
ENV = "SUMI_LIFELINE"  # "stdin": the parent holds the other end of this process's stdin
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_GRACE = 8.0  # seconds a watched child has to stop before its process group is killed

# Loaded once here: a forked child must not dlopen (it may deadlock on a lock another thread held).
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """A `preexec_fn`: SIGKILL this child when the parent thread that forked it exits (Linux only)."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def watch_stdin(on_parent_gone: Callable[[], None]) -> None:
    """Call `on_parent_gone` from a daemon thread once stdin reaches end of file."""

    def watch() -> None:
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        on_parent_gone()

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def hold_if_asked(asked: str | None) -> None:
    """In a `sumi serve` started by `sumi up`: kill this process group when `sumi up` is gone.

    The group is the service and the runtime processes it started (Node, Python
    workers), so none of them outlives the Host. Started any other way (a
    container platform), the service does nothing here.
    """
    if asked != "stdin":
        return

    def kill_group() -> None:
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    watch_stdin(kill_group)


def watchdog_argv(
    argv: list[str], stop_signal: int = signal.SIGTERM, grace: float = STOP_GRACE, user: int | None = None
) -> list[str]:
    """The command that runs `argv` under a watchdog (start it with stdin=PIPE, start_new_session=True)."""
    extra = ["--user", str(user)] if user is not None else []
    return [
        sys.executable,
        "-m",
        "sumi.infra.lifeline",
        "--stop-signal",
        str(int(stop_signal)),
        "--grace",
        str(grace),
        *extra,
        "--",
        *argv,
    ]


def stop_watched(proc: "subprocess.Popen[bytes] | None", grace: float = STOP_GRACE) -> None:
    """Stop a process started with `watchdog_argv`; bounded by `grace` and a little more."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace + 2)
        except subprocess.TimeoutExpired:
            proc.kill()  # its child has PR_SET_PDEATHSIG on Linux, and the lifeline below everywhere
            proc.wait()
    if proc.stdin is not None:
        proc.stdin.close()


def _watchdog(argv: list[str], stop_signal: int, grace: float, user: int | None) -> int:
    # Flags and polling, not an Event: a signal handler that takes a lock the
    # interrupted main thread holds would deadlock.
    asked: list[str] = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda s, f: asked.append("signal"))
    watch_stdin(lambda: asked.append("lifeline"))
    group = pwd.getpwuid(user).pw_gid if user is not None else None
    child = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent, user=user, group=group
    )
    while not asked and child.poll() is None:
        time.sleep(0.1)
    if child.poll() is None:
        child.send_signal(stop_signal)
        try:
            child.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:  # whatever is left of the child's group (postgres' own processes, a hung JVM)
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return child.wait()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m sumi.infra.lifeline", description="run a command under a watchdog")
    parser.add_argument("--stop-signal", type=int, default=int(signal.SIGTERM))
    parser.add_argument("--grace", type=float, default=STOP_GRACE)
    parser.add_argument("--user", type=int, default=None)
    parser.add_argument("argv", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    code = _watchdog(argv, args.stop_signal, args.grace, args.user)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
