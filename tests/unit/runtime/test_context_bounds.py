"""Issue 21: a context's limits hold for the context as a whole, whatever it does inside its walls.

forms.md: "128 MiB memory ... per context, the same for Python"; "every runtime process sits
behind OS walls (... a read-only file system holding only its Version)". Python worker code
owns its process, so each test below is a worker that tries to get around one bound; the
JavaScript runtime process is looked at from outside (/proc), as an escape would find it.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from sumi.runtime import JsRuntime, Limits, PyRuntime, _walls
from tests.unit.runtime.runtime_testkit import ENV, Host, batch, py, py_queue

HAVE = _walls.available()
needs_bwrap = pytest.mark.skipif(HAVE != "bwrap", reason=f"bubblewrap walls unavailable here (best: {HAVE})")
MiB = 1 << 20


async def seen_by(source: str, walls: str = "bwrap", heap_mb: int = 64) -> dict[str, object]:
    """What a Python worker reports of its attempts (it sends one message, a JSON object)."""
    host = Host()
    rt = PyRuntime(walls=walls, allow_unwalled=True)
    try:
        ctx = await rt.start_context(py(py_queue(source)), "worker.py", Limits(cpu_ms=20_000, heap_mb=heap_mb), host)
        result = await ctx.invoke_queue(batch(), ENV)
        await ctx.stop()
    finally:
        await rt.close()
    assert result.ok, result
    return dict(json.loads(base64.b64decode(host.calls[0][1]["messages"][0]["body"])))


FORK = """
import json, os, time
seen = {"forks": 0}
for _ in range(64):
    try:
        pid = os.fork()
    except OSError as e:
        seen["refused"] = e.errno
        break
    if pid == 0:
        block = bytearray(100 << 20)  # each child its own address space, were it let be
        time.sleep(5)
        os._exit(0)
    seen["forks"] += 1
await env.OUT.send(json.dumps(seen))
"""


@needs_bwrap
async def test_a_python_context_starts_no_process() -> None:  # forms.md: 128 MiB per context; QC-32
    seen = await seen_by(FORK)
    assert seen == {"forks": 0, "refused": 1}  # EPERM at the first fork


THREADS = """
import json, threading, time
threading.stack_size(1 << 16)  # small stacks: the address-space limit alone lets thousands through
n = 0
try:
    for _ in range(2000):
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
        n += 1
except RuntimeError:
    pass
await env.OUT.send(json.dumps({"threads": n}))
"""


@pytest.mark.parametrize("walls", ["bwrap", "unshare"])
async def test_a_python_context_has_a_bounded_number_of_threads(walls: str) -> None:  # forms.md walls; QC-32
    if HAVE == "none" or (walls == "bwrap" and HAVE != "bwrap"):
        pytest.skip(f"{walls} walls unavailable here (best: {HAVE})")
    seen = await seen_by(THREADS, walls)
    assert 0 < int(str(seen["threads"])) < 32  # its own namespace's allowance, not the machine's PIDs


SHARED = """
import ctypes, json, mmap
seen = {}
try:
    m = mmap.mmap(-1, 256 << 20)  # shared anonymous: not data, but address space
    m.write(b"x" * (256 << 20))
    seen["mmap"] = "held"
except (OSError, MemoryError, ValueError) as e:
    seen["mmap"] = type(e).__name__
libc = ctypes.CDLL(None, use_errno=True)
seen["shmget"] = libc.shmget(0, 256 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT|0600: memory of no process
await env.OUT.send(json.dumps(seen))
"""


@needs_bwrap
async def test_shared_memory_counts_against_a_python_context() -> None:  # forms.md: 128 MiB per context
    seen = await seen_by(SHARED)
    assert seen["mmap"] != "held" and seen["shmget"] == -1, seen


FILES = """
import json, os
seen = {}
for d in ("/", "/tmp", "/var/tmp", "/dev/shm", "/dev", "/version", "/opt/sumi", os.getcwd()):
    try:
        with open(os.path.join(d, "scratch"), "wb") as f:
            f.write(b"x" * (1 << 20))
        seen[d] = "wrote"
    except OSError as e:
        seen[d] = type(e).__name__
try:
    fd = os.memfd_create("scratch")
    seen["memfd"] = os.write(fd, b"x" * (1 << 20))
except OSError as e:
    seen["memfd"] = type(e).__name__
await env.OUT.send(json.dumps(seen))
"""


@needs_bwrap
async def test_a_python_context_writes_no_file_anywhere() -> None:  # forms.md: a read-only file system
    seen = await seen_by(FILES)
    assert "wrote" not in seen.values() and seen["memfd"] != 1 << 20, seen
    assert all(seen[d] in ("OSError", "FileNotFoundError", "PermissionError") for d in ("/", "/dev/shm", "/dev"))


@pytest.mark.skipif(HAVE == "none", reason="no user namespaces here: unshare cannot wall")
async def test_the_unshare_fallback_still_lets_no_byte_into_a_file(tmp_path: Path) -> None:  # forms.md walls
    # unshare leaves the Host's file system as it is (docs/security.md): user 65534 may create
    # an entry where anyone may, but the wall's zero file size keeps any byte out of it.
    seen = await seen_by(FILES.replace('"/opt/sumi"', '"/opt/sumi", "/dev/shm"'), "unshare")
    assert "wrote" not in seen.values() and seen["memfd"] != 1 << 20, seen
    for name in ("/tmp/scratch", "/dev/shm/scratch", "/var/tmp/scratch"):
        p = Path(name)
        if p.exists() and p.stat().st_uid == _walls.NOBODY:
            assert p.stat().st_size == 0
            p.unlink()


@needs_bwrap
async def test_the_javascript_runtime_sees_a_read_only_root() -> None:  # forms.md: a read-only file system
    rt = JsRuntime(test_hooks=True, walls="bwrap")
    await rt.start()
    try:
        assert await rt.debug_eval("return 1") == 1 and rt.pid is not None
        pid = rt.pid
        mounts = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
        limits = Path(f"/proc/{pid}/limits").read_text()
    finally:
        await rt.close()
    options = {m[4]: m[5].split(",") for m in mounts}
    assert "ro" in options["/"] and "ro" in options["/dev"], options
    assert [
        point
        for point, opts in options.items()
        if "ro" not in opts and point != "/proc" and not point.startswith("/dev/")
    ] == []
    assert [line.split()[3:5] for line in limits.splitlines() if line.startswith("Max file size")] == [["0", "0"]]
