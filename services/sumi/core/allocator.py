"""glibc's allocator, held to what a long-lived engine actually uses; and Python's cyclic
collector, kept off the heap a service starts with.

An engine folds its whole log at a start and then lives on a fraction of what that fold
allocated; glibc keeps the freed memory mapped (in the arena it came from, one arena per
thread that ever allocated: asyncio's resolver threads included). Measured with the scale
benchmark (300 k messages): the queue engine's RSS settled at 256.5 MB with the defaults and
154.8 MB with two arenas and a 128 KiB trim threshold; the live state was the same. So a
service caps its arenas when it starts and hands the fold's free pages back after a rebuild.

Only glibc has these calls; elsewhere (musl, macOS) both are no-ops.
"""

import ctypes
import ctypes.util
import gc
import logging
from functools import cache
from typing import Any

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


@cache
def _glibc() -> Any | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def cap_arenas() -> bool:
    """At a service's start, before its threads: at most ARENAS malloc arenas."""
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_ARENA_MAX, ARENAS))


def give_back() -> bool:
    """After a fold: return every free page to the OS (glibc's malloc_trim(0))."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


# The youngest generation's threshold: ten times Python's 700. Each minor collection walks only
# the young objects, but a service that allocates a few thousand per request or record ran
# hundreds of them a second.
YOUNG_THRESHOLD = 7_000


def settle_collector() -> None:
    """At a service's start, its modules imported: what exists now (modules, classes, functions,
    the routes: tens of thousands of objects, all of them for the process's life) leaves the
    cyclic collector's view (`gc.freeze`), so a full collection walks only what the service made
    since. A full collection of a gateway's imports alone took 14 ms, a stall for every request
    in flight (issue 41). Reference counting still frees all of it as ever."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
