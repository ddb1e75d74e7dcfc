"""A service's start leaves its imports out of the cyclic collector's walks
(`sumi.core.allocator.settle_collector`), and the collector still frees what is made later.

No requirement ID applies: the requirements say what a Host answers, not how its processes
collect garbage; the figures are issue 41's (`tests/bench/bench_overload.py`)."""

import json
import subprocess
import sys
import textwrap

_START = textwrap.dedent(
    """
    import gc, json, weakref
    import sumi.gateway.service  # a service's imports
    from sumi.core import allocator
    walked = len(gc.get_objects())
    allocator.settle_collector()
    class Node:
        pass
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle made after the start: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    print(json.dumps({"walked": walked, "after": len(gc.get_objects()), "frozen": gc.get_freeze_count(),
                      "young": gc.get_threshold()[0], "cycle_freed": gone() is None}))
    """
)


def test_the_imports_leave_the_collector_s_walks_and_a_later_cycle_is_still_freed() -> None:
    out = subprocess.run([sys.executable, "-c", _START], capture_output=True, text=True, check=True, timeout=60)
    got = json.loads(out.stdout)
    assert got["walked"] > 20_000 and got["frozen"] > 20_000
    assert got["after"] < got["walked"] / 10  # a full collection walks a tenth of what it did
    assert got["young"] == 7_000
    assert got["cycle_freed"] is True
