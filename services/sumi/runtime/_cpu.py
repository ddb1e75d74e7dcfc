"""CPU time of a Python context's processes, measured and bounded by the Host, from outside them.

A limit the worker's own process keeps (an interval timer, a soft ``RLIMIT_CPU``) is one the
worker can turn off, so the Host reads the CPU of every process under the context's launcher
from ``/proc`` (utime + stime of the live ones, plus cutime + cstime: what they reaped) and kills
the context when a budget is spent. Behind it, should the Host never look, the launcher starts
with ``RLIMIT_CPU`` soft = hard, which no process of the context can raise (that takes
``CAP_SYS_RESOURCE``) and each one it forks inherits: a bound on a context's whole life, since
lowering a limit cannot be undone for the next budget (``LIFE_BUDGETS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TICK_S = 1 / os.sysconf("SC_CLK_TCK")
MIN_LOOK_S, MAX_LOOK_S = 0.01, 0.5
CPUS = os.cpu_count() or 1
# The most budgets an honest context spends over its life: a workflow execution has one until its
# first step completes and one after each (WF-38: at most 1024 steps), plus one to spare; a queue
# context that comes near it is not reused (PyContext).
LIFE_BUDGETS = 1 + 1024 + 1


def _times(pid: int) -> tuple[float, float] | None:
    """(own CPU, own + reaped children's CPU) in seconds; None once the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    # Fields after the command name, which may itself hold spaces and parentheses.
    fields = stat[stat.rindex(b")") + 2 :].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) * TICK_S, (utime + stime + cutime + cstime) * TICK_S


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:  # a child is listed under the thread that forked it
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            pass
    return out


def tree(root: int) -> dict[int, tuple[float, float]]:
    """Every live process from root down, with its _times."""
    found: dict[int, tuple[float, float]] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        times = _times(pid) if pid not in found else None
        if times is not None:
            found[pid] = times
            todo += _children(pid)
    return found


def tree_cpu(root: int) -> float:
    return sum(total for _, total in tree(root).values())


def life_s(budget_ms: int) -> int:
    return math.ceil(budget_ms * LIFE_BUDGETS / 1000)


def capped(preexec: Callable[[], None], budget_ms: int) -> Callable[[], None]:
    """preexec, then the context's hard CPU limit (it runs in the forked launcher, before exec)."""
    limit = life_s(budget_ms)

    def cap() -> None:
        preexec()
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))

    return cap


@dataclass
class _Budget:
    root: int
    budget_s: float
    start_s: float
    on_breach: Callable[[], None]


class CpuMeter:
    """One task that looks at every metered context's processes: often when a budget is nearly
    spent, rarely when none is (at most the budget left spread over all CPUs between two looks)."""

    def __init__(self) -> None:
        self._budgets: dict[object, _Budget] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self, key: object, root: int, budget_ms: int, on_breach: Callable[[], None]) -> None:
        """Begin (or begin again) key's budget: CPU from now on counts against budget_ms."""
        budget_s = budget_ms / 1000
        self._budgets[key] = _Budget(root, budget_s, tree_cpu(root), on_breach)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    def forget(self, key: object) -> None:
        self._budgets.pop(key, None)

    async def _run(self) -> None:
        while self._budgets:
            self._wake.clear()
            wait = MAX_LOOK_S
            for key, b in list(self._budgets.items()):
                left = b.budget_s - (tree_cpu(b.root) - b.start_s)
                if left < 0:
                    self._budgets.pop(key, None)
                    b.on_breach()
                else:
                    wait = min(wait, left / CPUS)
            # Not asyncio.wait_for: on 3.11 it drops a cancel landing as the wake comes (see clock.woken,
            # which this module, staged alone for the Python runtime, cannot import).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, MIN_LOOK_S)):
                    await self._wake.wait()
