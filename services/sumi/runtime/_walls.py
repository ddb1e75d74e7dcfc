"""OS walls around a runtime child process, behind the language sandbox.

The ``vm`` sandbox (JavaScript) is one layer; an escape from it that nobody
has found yet must still reach nothing. So each runtime process starts:

- with an empty environment (no Host secret such as ``SUMI_DATABASE_URL``);
- in its own network namespace (no route to the Host's loopback: not the
  gateway, the broker or the database), and its own PID, IPC and UTS ones;
- as the unprivileged user 65534 (``nobody``), when the Host runs as root
  (otherwise as the Host's own user, inside a user namespace);
- seeing read-only only the interpreter, the runtime's own code and the
  Version's modules, on a read-only root (``bwrap`` only; ``unshare`` leaves
  the file system as it is);
- under ``RLIMIT_DATA``, a memory cap on the whole process, and
  ``RLIMIT_FSIZE`` 0: no byte into any file, wherever one is writable.

``bwrap`` (bubblewrap) does all of it in one call. ``unshare`` (util-linux) is
the fallback where it is missing: environment, namespaces, user and memory,
but the file system stays visible to user 65534. ``none``: only the empty
environment and the memory cap hold. Which one this machine has is probed
once (:func:`available`); the setting ``runtime_walls`` may name a weaker one.
"""

from __future__ import annotations

import functools
import hashlib
import os
import resource
import shutil
import stat as statmod
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["bwrap", "unshare", "none"]
KINDS: tuple[Kind, ...] = ("bwrap", "unshare", "none")
NOBODY = 65534
# The niceness worker code runs at, added to its engine's: the Host's processes come first.
WORKER_NICE = 10
# What any interpreter needs to start: the system's libraries and binaries.
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
_UNSHARE_FLAGS = ["--user", f"--map-user={NOBODY}", f"--map-group={NOBODY}", "--net", "--pid", "--ipc", "--uts"]


def user() -> dict[str, Any]:
    """Popen arguments that start the launcher as nobody when we are root.

    The launcher itself drops root (not only the process inside): a user
    namespace made by root maps its users back to root outside, and files
    would be checked as root's.
    """
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}


def _works(argv: Sequence[str]) -> bool:
    try:
        done = subprocess.run(list(argv), capture_output=True, timeout=10, env={}, **user())
        return bool(done.returncode == 0)
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def available() -> Kind:
    """The strongest wall this machine can put up (probed once per process)."""
    bwrap, unshare = shutil.which("bwrap"), shutil.which("unshare")
    true = shutil.which("true") or "/bin/true"
    if bwrap and _works([bwrap, *_bwrap_flags([]), *_READ_ONLY, true]):
        return "bwrap"
    if unshare and _works([unshare, *_UNSHARE_FLAGS, "--fork", "--kill-child", true]):
        return "unshare"
    return "none"


def _bwrap_flags(ro: Sequence[str]) -> list[str]:
    flags = ["--unshare-all", "--die-with-parent", "--new-session", "--clearenv"]
    flags += ["--uid", str(NOBODY), "--gid", str(NOBODY)]
    for d in SYSTEM_DIRS:
        flags += ["--ro-bind-try", d, d]
    for path in ro:
        flags += ["--ro-bind", path, path]
    return [*flags, "--proc", "/proc", "--dev", "/dev"]


# Last, once every mount is in place: bwrap's own root and /dev are tmpfs it made writable
# (its /dev/shm is a directory of /dev), so they are made read-only. /dev/null stays writable:
# writing a device writes no file.
_READ_ONLY = ["--remount-ro", "/dev", "--remount-ro", "/"]


@dataclass(frozen=True)
class Wall:
    kind: Kind
    memory_mb: int  # RLIMIT_DATA of the whole process

    @property
    def hides_files(self) -> bool:
        return self.kind == "bwrap"

    def argv(
        self,
        command: Sequence[str],
        *,
        ro: Sequence[str | Path] = (),
        binds: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        chdir: str | None = None,
    ) -> list[str]:
        """``command`` behind this wall. ``ro``: paths visible read-only at the
        same place; ``binds``: host path -> sandbox path, read-only."""
        if self.kind == "none":
            return list(command)
        if self.kind == "unshare":
            unshare = shutil.which("unshare") or "unshare"
            # A shell stays as the namespace's first process, with the command its child, as
            # bwrap's reaper does: the first process of a PID namespace ignores signals it
            # has no handler for, among them the CPU limit's SIGPROF/SIGXCPU.
            reaper = [shutil.which("sh") or "/bin/sh", "-c", '"$@"; exit $?', "sh"]
            return [unshare, *_UNSHARE_FLAGS, "--fork", "--kill-child", *reaper, *command]
        flags = _bwrap_flags([str(p) for p in ro if Path(p).exists()])
        for source, target in (binds or {}).items():
            flags += ["--ro-bind", source, target]
        for name, value in (env or {}).items():
            flags += ["--setenv", name, value]
        if chdir is not None:
            flags += ["--chdir", chdir]
        return [shutil.which("bwrap") or "bwrap", *flags, *_READ_ONLY, "--", *command]

    def env(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The process environment: only what the runtime needs, whatever the wall."""
        return dict(env or {}) if self.kind != "bwrap" else {}

    def preexec(self) -> Callable[[], None]:
        limit = self.memory_mb * 1024 * 1024

        def cap() -> None:  # runs in the forked child, before exec: the wall's memory cap
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
            # No file of any size: whatever the wall leaves writable (the unshare fallback
            # leaves the Host's /tmp and /dev/shm), a tmpfs or memfd page would be memory
            # no limit counts. Neither runtime writes a file; its output is a pipe.
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            # Below the Host's own processes: every Space's deliveries and commits pass through
            # them, so one Space's busy handlers must not take their CPU (issue 21, class 9).
            # RLIMIT_NICE 0: no process of the context may raise its priority back.
            os.nice(WORKER_NICE)
            resource.setrlimit(resource.RLIMIT_NICE, (0, 0))

        return cap

    def path(self, host_path: str, sandbox_path: str) -> str:
        """Where a bound directory appears inside the wall."""
        return sandbox_path if self.kind == "bwrap" else host_path


def command_pid(outer: int) -> int:
    """The wrapped command's own process: down the line of only children from the launcher
    (bwrap puts a reaper first in the namespace; the command is its child)."""
    pid = sandboxed_pid(outer)
    while pid:
        child = sandboxed_pid(pid)
        if not child:
            return pid
        pid = child
    return 0


def sandboxed_pid(outer: int) -> int:
    """The process a wall's launcher started (the one to kill to stop everything).

    ``bwrap`` and ``unshare --fork`` stay as the parent of the sandboxed
    process, the first process of a new PID namespace: when it dies the kernel
    kills every process in that namespace before its parent reaps it. So
    killing it, and waiting for the launcher to exit, means that no process of
    the sandbox runs any more (WF-46).
    """
    try:
        children = Path(f"/proc/{outer}/task/{outer}/children").read_text().split()
    except OSError:
        return 0
    return int(children[0]) if children else 0


def stage(files: Sequence[Path], dest: Path) -> Path:
    """Copy a runtime's own code into dest, readable by the sandbox's user.

    The sandbox then sees exactly these files, wherever the Host was installed
    (a checkout under /root is not readable by user 65534).
    """
    dest.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copyfile(f, dest / f.name)
        (dest / f.name).chmod(0o444)
    dest.chmod(0o755)
    return dest


def stage_once(prefix: str, layout: Mapping[str, Sequence[Path]]) -> Path:
    """Stage a runtime's code (sub-path -> files) once per content, shared and left in place.

    The directory is named by the files' hash, so every runtime of this user
    on this version reuses it, and a Host killed by SIGKILL leaves no copy per
    run behind. It is used only if it is ours and writable by nobody else (the
    temporary directory is shared); otherwise a private copy is used.
    """
    digest = hashlib.sha256()
    for sub, files in sorted(layout.items()):
        for f in files:
            digest.update(f"{sub}/{f.name}\0".encode())
            digest.update(f.read_bytes())
    base = Path(tempfile.gettempdir()) / f"{prefix}{os.geteuid()}-{digest.hexdigest()[:16]}"
    if _ours(base):
        return base
    fresh = Path(tempfile.mkdtemp(prefix=f"{prefix}tmp-"))
    fresh.chmod(0o755)
    for sub, files in layout.items():
        stage(files, fresh / sub)
    for d in fresh.rglob("*"):
        if d.is_dir():
            d.chmod(0o755)  # every level readable by the sandbox's user, whatever the umask
    try:
        fresh.rename(base)
    except OSError:
        pass  # another runtime staged it first, or a stranger's directory is in the way
    if _ours(base):
        shutil.rmtree(fresh, ignore_errors=True)
        return base
    return fresh


def _ours(path: Path) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return statmod.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def give_to_sandbox(root: Path) -> None:
    """Make a Version's directory the sandbox user's (it is bound read-only)."""
    if os.geteuid() != 0:
        return
    for dirpath, _, filenames in os.walk(root):
        os.chown(dirpath, NOBODY, NOBODY)
        for name in filenames:
            os.chown(os.path.join(dirpath, name), NOBODY, NOBODY)


def python_for_sandbox() -> tuple[str, list[str]]:
    """An interpreter the sandbox user can run, and the paths it needs read-only.

    The child needs the standard library only. A system interpreter of the
    same version under /usr is preferred: a virtual environment or pyenv
    install may sit where user 65534 cannot read (e.g. under /root).
    """
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if system.exists():
        return str(system), []
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    return base, [sys.base_prefix]


def choose(setting: str, memory_mb: int) -> Wall:
    """The wall a runtime puts up: the setting's kind if named, else the strongest available."""
    if setting and setting not in KINDS:
        raise ValueError(f"runtime_walls must be one of {', '.join(KINDS)}, not {setting!r}")
    return Wall(setting or available(), memory_mb)
