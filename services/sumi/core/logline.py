"""A worker's log line as the API answers it (JSON) and as a terminal shows it (`sumi logs`, `sumi up --logs`)."""

from typing import Any

from sumi.core.records import WorkerLogged
from sumi.core.times import rfc3339


def item(rec: WorkerLogged) -> dict[str, Any]:
    out: dict[str, Any] = {
        "at": rfc3339(rec.at),
        "level": rec.level,
        "text": rec.text,
        "worker": rec.workerUid,
        "version": rec.versionUid,
        "resource": rec.resourceUid,
    }
    for name, value in (("batchId", rec.batchId), ("instanceId", rec.instanceId), ("step", rec.step)):
        if value is not None:
            out[name] = value
    if rec.dropped:
        out["dropped"] = rec.dropped
    return out


def format_line(entry: dict[str, Any]) -> str:
    where = [f"{k} {entry[k]}" for k in ("batchId", "instanceId", "step") if k in entry]
    tag = f" [{', '.join(where)}]" if where else ""
    return f"{entry['at']} {entry['level']:<5}{tag} {entry['text']}"
