"""Bytes per workflow instance in the engine's memory, measured in-process (issue 17, "bounded
memory"): N one-step instances created, run and completed through the pure core the way the
engine does it (decisions folded into the instance table, data keys into the ring, decided
command IDs remembered), with no broker; with --rebuilt every record goes through the log's
codec first, as a restart reads them back (each string a new object). Prints tracemalloc's bytes per instance for the
table, the ring and the remembered IDs, and one instance's bytes by field (objects shared by
every instance, such as a status string or the Version UID, counted nowhere).

    .venv/bin/python -m tests.bench.wf_memory [--rebuilt] 10000 100000
"""

import dataclasses
import gc
import itertools
import json
import sys
import tracemalloc
from collections import OrderedDict
from typing import Any

from sumi.core import records as r
from sumi.core import sealing
from sumi.wire import codec
from sumi.workflow.commands import UNSET, CreateInstance
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules import _keys
from sumi.workflow.rules._state import Instance, LogRecord
from sumi.workflow.rules._table import InstanceTable

T0 = 1_700_000_000_000
_ids = itertools.count()


def ulid() -> str:
    return f"01JF{next(_ids):022d}"  # 26 characters, a new string each time, as a decoded ID is


class World:
    """The engine's per-instance memory: table, ring, remembered command IDs."""

    def __init__(self, rebuilt: bool) -> None:
        self.rebuilt = rebuilt
        self.table = InstanceTable(d.Limits())
        self.ring = sealing.KeyRing()
        self.decided: OrderedDict[str, None] = OrderedDict()
        self.wf = d.WorkflowView(exists=True, space="demo", ready=True)
        self.version = f"ver_{ulid()}"  # one Version, shared by every context (the allocation's string)

    def fold(self, key: str, records: list[LogRecord]) -> None:
        for made in records:
            rec = codec.decode(codec.encode(made)) if self.rebuilt else made
            assert isinstance(rec, r.WorkflowRecord | r.CommandDecided)
            if isinstance(rec, r.CommandDecided):
                self.decided[rec.commandId] = None
                continue
            change = _keys.changes(self.table.instances.get(key), rec, self.ring, T0, lambda: f"dk_{ulid()}")
            for new in change.made:
                self.ring.add(codec.decode(codec.encode(new)) if self.rebuilt else new)  # type: ignore[arg-type]
            self.table.fold(key, rec)
            for dropped in change.dropped:
                self.ring.drop(dropped)

    def one(self, i: int) -> None:
        wf_uid = "".join(["wf_", "01JFWORKFLOW0000000000000A"])  # decoded per command: its own string
        iid = f"inst-{i}"
        key = f"{wf_uid}/{iid}"
        caller = d.Caller(f"cmd_{ulid()}", "demo", "alice", "instance.create")
        self.fold(key, d.create(None, CreateInstance(wf_uid, iid, UNSET), self.wf, caller, T0).records)
        inst = self.table.instances[key]
        token = f"own_{ulid()}"
        self.fold(key, d.start(inst, token, self.version, T0, self.table.limits).records)
        args = {"name": "s", "ok": True, "result": {"ok": True}, "config": {"maxAttempts": 1}}
        self.fold(key, d.call(inst, token, "step.do", args, T0, self.table.limits).records)
        self.fold(key, d.outcome(inst, "complete", T0, {"ok": True}).records)


def deep(obj: Any, shared: set[int], seen: set[int]) -> int:
    """getsizeof of `obj` and what it holds, less what is in `shared` or counted already."""
    if id(obj) in shared or id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep(k, shared, seen) + deep(v, shared, seen) for k, v in obj.items())
    elif isinstance(obj, list | tuple | set | frozenset):
        size += sum(deep(x, shared, seen) for x in obj)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        size += sum(deep(getattr(obj, f.name), shared, seen) for f in dataclasses.fields(obj))
    return size


def by_field(a: Instance, b: Instance) -> dict[str, int]:
    """One instance's bytes by field; an object `b` holds too is shared and not counted."""
    shared: set[int] = set()

    def mark(obj: Any) -> None:
        shared.add(id(obj))
        if isinstance(obj, dict):
            for k, v in obj.items():
                mark(k)
                mark(v)
        elif isinstance(obj, list | tuple | set | frozenset):
            for x in obj:
                mark(x)
        elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            for f in dataclasses.fields(obj):
                mark(getattr(obj, f.name))

    for f in dataclasses.fields(b):
        mark(getattr(b, f.name))
    seen: set[int] = set()
    out: dict[str, int] = {}
    for f in dataclasses.fields(a):
        out[f.name] = deep(getattr(a, f.name), shared, seen)
    return out


def measure(n: int, rebuilt: bool) -> dict[str, Any]:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.take_snapshot()
    world = World(rebuilt)
    for i in range(n):
        world.one(i)
    gc.collect()
    snap = tracemalloc.take_snapshot()
    tracemalloc.stop()
    total = sum(s.size_diff for s in snap.compare_to(base, "filename"))
    sites = sorted(snap.compare_to(base, "lineno"), key=lambda s: -s.size_diff)[:12]
    parts = {
        "table": world.table,
        "ring": world.ring,
        "decided IDs": world.decided,
    }
    insts = list(world.table.instances.values())
    fields = by_field(insts[n // 2], insts[n // 2 + 1])
    out: dict[str, Any] = {
        "instances": n,
        "rebuilt": rebuilt,
        "bytes per instance (tracemalloc, all)": round(total / n),
    }
    seen: set[int] = set()
    for name, part in parts.items():
        out[f"bytes per instance: {name}"] = round(_reach(part, seen) / n)
    out["allocation sites, bytes per instance"] = {
        f"{s.traceback[0].filename.rsplit('/', 2)[-1]}:{s.traceback[0].lineno}": round(s.size_diff / n) for s in sites
    }
    out["one terminal instance by field"] = {k: v for k, v in fields.items() if v}
    out["one terminal instance, sum"] = sum(fields.values())
    return out


def _reach(obj: Any, seen: set[int]) -> int:
    """Everything reachable from `obj` through containers, dataclasses and objects' dicts."""
    size, stack = 0, [obj]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        size += sys.getsizeof(x)
        if isinstance(x, dict):
            stack += [*x.keys(), *x.values()]
        elif isinstance(x, list | tuple | set | frozenset):
            stack += list(x)
        elif isinstance(x, str | bytes | int | float | bool | type(None)):
            continue
        else:
            if hasattr(x, "__dict__"):
                stack.append(vars(x))
            for slot in getattr(type(x), "__slots__", ()):
                if hasattr(x, slot):
                    stack.append(getattr(x, slot))
    return size


def main() -> None:
    rebuilt = "--rebuilt" in sys.argv
    for n in (int(a) for a in sys.argv[1:] if a != "--rebuilt"):
        print(json.dumps(measure(n, rebuilt), indent=1), flush=True)


if __name__ == "__main__":
    main()
