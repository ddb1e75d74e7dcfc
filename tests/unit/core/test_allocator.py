"""The allocator's two calls on this machine's glibc (`sumi.core.allocator`)."""

import subprocess
import sys
import textwrap

import pytest

from sumi.core import allocator

pytestmark = pytest.mark.skipif(allocator._glibc() is None, reason="not glibc: both calls are no-ops")

# A fold's garbage: many small objects (below glibc's mmap threshold, so freeing them keeps
# the pages mapped), dropped, with a few survivors spread among them pinning the heap's top.
_FOLD = textwrap.dedent(
    """
    import json, sys
    from sumi.core import allocator
    def rss():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
    capped = allocator.cap_arenas()
    garbage = [bytes(600) + i.to_bytes(4, "big") for i in range(300_000)]
    kept = garbage[::5000]
    before = rss()
    del garbage
    freed = rss()
    allocator.give_back()
    print(json.dumps({"capped": capped, "before": before, "freed": freed, "given": rss()}))
    """
)


# QC-22: an engine's memory after a fold is what its state holds, not what the fold allocated
def test_the_fold_s_free_pages_go_back_to_the_os() -> None:
    out = subprocess.run([sys.executable, "-c", _FOLD], capture_output=True, text=True, check=True, timeout=60)
    got = __import__("json").loads(out.stdout)
    assert got["capped"] is True
    assert got["before"] > 150  # MB: the fold's objects were resident
    assert got["freed"] > got["before"] * 0.8  # glibc kept most of it mapped
    assert got["given"] < got["before"] * 0.3  # handed back
