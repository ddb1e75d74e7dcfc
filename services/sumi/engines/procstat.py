"""CPU time and resident memory of the runtime processes, read from Linux's /proc.

Elsewhere (or for a process already gone) the values are absent, not zero.
"""

import os

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def usage(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, resident bytes) of one process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/statm") as f:
            rss_pages = int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5), after the name
    return (utime + stime) / _TICK, rss_pages * _PAGE
