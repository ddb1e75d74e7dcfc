"""QueueConsumer 0.3.0: a consume Attachment from one AtLeastOnceQueue to one ModuleWorker.

Pure rules only (QC-1..20, QC-38..42). Delivery itself is the queue engine's
(`sumi.queue`); this Form decides what may be attached. Create and update take
effect as soon as the control log holds them (QC-37: success means the settings
were accepted); a delete is awaited until the engine has fixed its stop
boundary and reports it (QC-42).
"""

from collections.abc import Mapping
from typing import Any

from sumi.control.rules.forms._base import (
    BaseForm,
    Registry,
    ResourceView,
    closed_object,
    integer_in,
    reference_shape,
    resolve,
)
from sumi.control.rules.forms.names import MODULE_WORKER, QUEUE, QUEUE_CONSUMER
from sumi.core.problems import FieldError, Problem

REFS = ("queue", "worker")
# QC-4..8: every setting is required, an integer, inclusive at both edges.
RANGES = {
    "maxBatchSize": (1, 100),
    "maxBatchTimeoutSeconds": (0, 60),
    "maxConcurrency": (1, 250),
    "maxRetries": (0, 100),
    "retryDelaySeconds": (0, 43_200),
}
IMMUTABLE = ("queue", "worker")  # QC-2, QC-3, QC-12, QC-40


class QueueConsumer(BaseForm):
    url = QUEUE_CONSUMER

    def validate_spec(self, spec: object) -> list[FieldError]:
        # QC-1, QC-10, QC-11, QC-53: a closed object, every field required but deadLetterQueue.
        spec, errors = closed_object(spec, "/spec", [*REFS, *RANGES], ["deadLetterQueue"])
        for name in (*REFS, "deadLetterQueue"):
            if name in spec:
                errors += reference_shape(spec[name], f"/spec/{name}")
        for name, (low, high) in RANGES.items():
            if name in spec:
                errors += integer_in(spec[name], f"/spec/{name}", low, high)
        return errors

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
        why = "is immutable: delete the Consumer and create a new one"
        return [FieldError(f"/spec/{name}", why) for name in IMMUTABLE if old.get(name) != new.get(name)]

    def check_references(self, registry: Registry, spec: Mapping[str, Any], self_uid: str | None) -> Problem | None:
        queue, problem = resolve(registry, spec["queue"], QUEUE, "queue")
        if problem:
            return problem
        worker, problem = resolve(registry, spec["worker"], MODULE_WORKER, "worker")
        if problem:
            return problem
        if "deadLetterQueue" in spec:
            _, problem = resolve(registry, spec["deadLetterQueue"], QUEUE, "deadLetterQueue")
            if problem:
                return problem
        assert queue is not None and worker is not None
        return (
            _requires_queue_handler(worker)
            or _one_consumer(registry, queue.uid, self_uid)
            or _no_dead_letter_cycle(registry, spec, self_uid)
        )

    def completion(self, kind: str, registry: Registry, resource: ResourceView) -> str:
        # QC-42: only the engine can prove the stop boundary of a delete.
        return "await" if kind == "delete" else "now"


def _requires_queue_handler(worker: ResourceView) -> Problem | None:
    # QC-16: ModuleWorker spec.handlers declares the entry points every Version provides.
    if "queue" not in (worker.spec.get("handlers") or []):
        return Problem("dependency_conflict", f"worker {worker.uid}: does not declare the queue handler")
    return None


def _one_consumer(registry: Registry, queue_uid: str, self_uid: str | None) -> Problem | None:
    # QC-17, QC-40, QC-48: a Consumer being deleted still holds its queue until it is gone.
    for other in consumers(registry):
        if other.uid != self_uid and other.spec["queue"]["resourceUid"] == queue_uid:
            return Problem("dependency_conflict", f"queue {queue_uid}: already consumed by QueueConsumer {other.uid}")
    return None


def _no_dead_letter_cycle(registry: Registry, spec: Mapping[str, Any], self_uid: str | None) -> Problem | None:
    # QC-19: edges consumed queue -> dead-letter queue over all Consumers, the candidate included.
    edges: dict[str, set[str]] = {}
    specs = [c.spec for c in consumers(registry) if c.uid != self_uid] + [spec]
    for s in specs:
        if "deadLetterQueue" in s:
            frm, to = s["queue"]["resourceUid"], s["deadLetterQueue"]["resourceUid"]
            edges.setdefault(frm, set()).add(to)
    start = spec["queue"]["resourceUid"]
    dlq = spec.get("deadLetterQueue", {}).get("resourceUid")
    if dlq is None:
        return None
    if dlq == start:
        return Problem("dependency_conflict", f"deadLetterQueue {dlq}: is the queue this Consumer drains")
    if _reaches(edges, dlq, start):
        return Problem(
            "dependency_conflict", f"deadLetterQueue {dlq}: leads back to queue {start} (a dead-letter cycle)"
        )
    return None


def _reaches(edges: Mapping[str, set[str]], frm: str, to: str) -> bool:
    seen, todo = set(), [frm]
    while todo:
        node = todo.pop()
        if node == to:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return False


def consumers(registry: Registry) -> list[ResourceView]:
    return [r for r in registry.all() if r.form == QUEUE_CONSUMER]
