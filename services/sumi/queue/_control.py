"""The control log as the queue engine sees it: a global table of Resources and Operations.

Pure: folded from control records (every partition, every Space), read by the
engine to learn its Consumers, their queues, workers, Deployments and Versions.
"""

import json
from dataclasses import dataclass, field, replace
from typing import Any

from sumi.control.forms.names import (
    MODULE_WORKER,
    QUEUE,
    QUEUE_CONSUMER,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.core import records as r

LIVE = ("active", "updating")


@dataclass(frozen=True)
class Res:
    uid: str
    space: str
    name: str
    form: str
    spec: Any
    state: str = "creating"
    observed: Any = None


@dataclass(frozen=True)
class Op:
    id: str
    kind: str
    space: str
    resource_uid: str
    state: str = "pending"


@dataclass(frozen=True)
class Consumer:
    """A QueueConsumer's delivery settings (QC-4..9), as its current spec says."""

    uid: str
    space: str
    queue: str
    worker: str
    max_batch_size: int
    max_batch_timeout_s: int
    max_concurrency: int
    max_retries: int
    retry_delay_s: int
    dead_letter_queue: str | None
    state: str

    @classmethod
    def of(cls, res: Res) -> "Consumer":
        s = res.spec
        dlq = s.get("deadLetterQueue")
        return cls(
            res.uid,
            res.space,
            s["queue"]["resourceUid"],
            s["worker"]["resourceUid"],
            s["maxBatchSize"],
            s["maxBatchTimeoutSeconds"],
            s["maxConcurrency"],
            s["maxRetries"],
            s["retryDelaySeconds"],
            dlq["resourceUid"] if dlq else None,
            res.state,
        )


@dataclass(frozen=True)
class Code:
    """What a batch runs: one usable WorkerVersion of the worker."""

    version_uid: str
    runtime: str
    main_module: str
    modules: tuple[tuple[str, str], ...]
    vars: dict[str, str]
    queue_bindings: dict[str, str]  # binding name -> queue uid


@dataclass
class ControlTable:
    resources: dict[str, Res] = field(default_factory=dict)
    operations: dict[str, Op] = field(default_factory=dict)
    deleted_queues: set[str] = field(default_factory=set)
    # A Deployment update takes effect only when its Operation succeeds (forms.md): until
    # then the allocation in force is the spec it replaced.
    replaced_specs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fold(self, rec: Any) -> None:
        if isinstance(rec, r.ResourceCreated):
            self.resources[rec.uid] = Res(rec.uid, rec.space, rec.name, rec.form, json.loads(rec.spec))
        elif isinstance(rec, r.ResourceUpdated) and rec.uid in self.resources:
            old = self.resources[rec.uid]
            if old.form == WORKER_DEPLOYMENT:
                self.replaced_specs.setdefault(rec.uid, old.spec)
            self.resources[rec.uid] = replace(old, spec=json.loads(rec.spec))
        elif isinstance(rec, r.ResourceStateChanged) and rec.uid in self.resources:
            self.resources[rec.uid] = replace(self.resources[rec.uid], state=rec.state)
            if rec.state != "updating":
                self.replaced_specs.pop(rec.uid, None)
        elif isinstance(rec, r.ResourceObserved) and rec.uid in self.resources:
            self.resources[rec.uid] = replace(self.resources[rec.uid], observed=json.loads(rec.observed))
        elif isinstance(rec, r.ResourceDeleted):
            gone = self.resources.pop(rec.uid, None)
            if gone is not None and gone.form == QUEUE:
                self.deleted_queues.add(rec.uid)
        elif isinstance(rec, r.OperationStarted):
            self.operations[rec.id] = Op(rec.id, rec.kind, rec.space, rec.resourceUid)
        elif isinstance(rec, r.OperationStateChanged) and rec.id in self.operations:
            if rec.state in ("succeeded", "failed"):
                self.operations.pop(rec.id)
            else:
                self.operations[rec.id] = replace(self.operations[rec.id], state=rec.state)
        elif isinstance(rec, r.SpaceDeleted):
            for uid in [u for u, res in self.resources.items() if res.space == rec.space]:
                self.fold(r.ResourceDeleted(uid, rec.space, "", rec.deletedAt))

    # ---- questions the engine asks ---------------------------------------------------------

    def consumers(self) -> list[Consumer]:
        return [Consumer.of(res) for res in self.resources.values() if res.form == QUEUE_CONSUMER]

    def queue(self, uid: str) -> Res | None:
        res = self.resources.get(uid)
        return res if res is not None and res.form == QUEUE else None

    def worker(self, uid: str) -> Res | None:
        res = self.resources.get(uid)
        return res if res is not None and res.form == MODULE_WORKER else None

    def unfinished_delete(self, uid: str) -> Op | None:
        return next((op for op in self.operations.values() if op.resource_uid == uid and op.kind == "delete"), None)

    def allocation(self, worker_uid: str) -> list[tuple[str, int]]:
        """The active Deployment's weighted Versions that are usable (their Resource is active)."""
        for res in self.resources.values():
            if (
                res.form == WORKER_DEPLOYMENT
                and res.state in LIVE
                and res.spec.get("worker", {}).get("resourceUid") == worker_uid
            ):
                out = []
                spec = self.replaced_specs.get(res.uid, res.spec) if res.state == "updating" else res.spec
                for entry in spec.get("versions", []):
                    v = self.resources.get(entry["version"]["resourceUid"])
                    if v is not None and v.form == WORKER_VERSION and v.state in LIVE:
                        out.append((v.uid, int(entry["percentage"])))
                return out
        return []

    def code(self, version_uid: str) -> Code | None:
        v = self.resources.get(version_uid)
        if v is None or v.form != WORKER_VERSION:
            return None
        worker = self.worker(v.spec["worker"]["resourceUid"])
        if worker is None:
            return None
        s = v.spec
        return Code(
            v.uid,
            worker.spec["runtime"],
            s["mainModule"],
            tuple((m["name"], m["content"]) for m in s["modules"]),
            {k: str(x) for k, x in (s.get("vars") or {}).items()},
            {b["name"]: b["queue"]["resourceUid"] for b in s.get("queueBindings") or []},
        )
