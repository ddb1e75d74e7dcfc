"""WorkerDeployment 0.4.0 (forms.md): the weighted allocation of one worker's traffic.

A create/PUT that weights a Version still verifying is accepted and awaited:
its Operation stays running until every weighted Version is verified, then it
succeeds or fails `dependency_conflict` (the control processor asks `settle`
whenever an awaited Operation of the Space ends, and at apply time). A failed
update leaves the previous allocation active (`_decide._finish` puts the
previous spec back).
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
from sumi.control.rules.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.control.rules.forms.worker_version import class_fitness, load_fitness, worker_of
from sumi.core.problems import FieldError, Problem

MAX_ENTRIES = 10


def version_fitness(registry: Registry, version: ResourceView, worker: ResourceView) -> str | Problem:
    """ "pending" while the Version verifies, "ok" when it can serve the worker, else why not.

    Pending verification is never taken as incompatibility (WF-6)."""
    loaded = load_fitness(version)
    if loaded != "ok":
        return loaded
    provided = set(version.observed.get("handlers") or ())
    missing = [h for h in worker.spec.get("handlers", []) if h not in provided]
    if missing:  # QC-16
        return Problem(
            "dependency_conflict",
            f"version {version.uid} lacks the handler {missing[0]!r} worker {worker.uid} declares",
        )
    for workflow in registry.all():  # WF-5, WF-28
        if workflow.form != DURABLE_WORKFLOW or worker_of(workflow.spec) != worker.uid:
            continue
        fitness = class_fitness(version, str(workflow.spec.get("className")))
        if isinstance(fitness, Problem):
            return Problem("dependency_conflict", f"{fitness.detail} that DurableWorkflow {workflow.uid} names")
    return "ok"


def weighted(spec: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The allocation a Deployment spec describes: [(version uid, percentage)]."""
    return [(e["version"]["resourceUid"], e["percentage"]) for e in spec.get("versions", [])]


def active_deployment(registry: Registry, worker_uid: str) -> ResourceView | None:
    """The worker's Deployment while its allocation is the active one (active or updating)."""
    return next(
        (
            d
            for d in registry.all()
            if d.form == WORKER_DEPLOYMENT and worker_of(d.spec) == worker_uid and d.state in ("active", "updating")
        ),
        None,
    )


def active_allocation(registry: Registry, worker_uid: str) -> list[tuple[str, int]] | None:
    """The allocation in force for a worker (None: no active Deployment).

    While an update of the Deployment waits for a Version to verify, the Deployment's
    spec is already the new one, but the previous allocation stays in force until the
    update succeeds (the Operation remembers it; the control state's `unfinished_operation`)."""
    deployment = active_deployment(registry, worker_uid)
    if deployment is None:
        return None
    if deployment.state == "updating":
        unfinished = getattr(registry, "unfinished_operation", None)
        op = unfinished(deployment.uid) if unfinished is not None else None
        previous = getattr(op, "previous_spec", None)
        if op is not None and op.kind == "update" and previous is not None:
            return weighted(previous)
    return weighted(deployment.spec)


def allocations_to_check(registry: Registry, worker_uid: str) -> list[list[tuple[str, int]]]:
    """WF-4: the active allocation and the one an accepted, unfinished Deployment create or
    update will apply; every weighted Version in them must fit a new DurableWorkflow."""
    found: list[list[tuple[str, int]]] = []
    active = active_allocation(registry, worker_uid)
    if active is not None:
        found.append(active)
    for d in registry.all():
        if (
            d.form == WORKER_DEPLOYMENT
            and worker_of(d.spec) == worker_uid
            and d.state in ("creating", "updating")
            and weighted(d.spec) not in found
        ):
            found.append(weighted(d.spec))
    return found


class WorkerDeployment(BaseForm):
    url = WORKER_DEPLOYMENT

    def validate_spec(self, spec: object) -> list[FieldError]:
        spec, errors = closed_object(spec, "/spec", ["worker", "versions"])
        if "worker" in spec:
            errors += reference_shape(spec["worker"], "/spec/worker")
        if "versions" not in spec:
            return errors
        entries = spec["versions"]
        if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ENTRIES:
            return errors + [FieldError("/spec/versions", f"must be an array of 1..{MAX_ENTRIES} entries")]
        seen: set[str] = set()
        total, sums = 0, True
        for i, entry in enumerate(entries):
            path = f"/spec/versions/{i}"
            entry, errs = closed_object(entry, path, ["version", "percentage"])
            errors += errs
            if "version" in entry:
                ref_errors = reference_shape(entry["version"], f"{path}/version")
                errors += ref_errors
                if not ref_errors:
                    uid = entry["version"]["resourceUid"]
                    if uid in seen:
                        errors.append(FieldError(f"{path}/version", "weights a Version twice"))
                    seen.add(uid)
            if "percentage" in entry:
                errs = integer_in(entry["percentage"], f"{path}/percentage", 1, 100)
                errors += errs
                if errs:
                    sums = False
                else:
                    total += entry["percentage"]
            else:
                sums = False
        if sums and total != 100:
            errors.append(FieldError("/spec/versions", f"percentages sum to {total}, not 100"))
        return errors

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
        if worker_of(old) != worker_of(new):
            return [FieldError("/spec/worker", "is immutable")]
        return []

    def check_references(self, registry: Registry, spec: Mapping[str, Any], self_uid: str | None) -> Problem | None:
        worker, problem = resolve(registry, spec["worker"], MODULE_WORKER, "worker")
        if problem:
            return problem
        assert worker is not None
        other = next(
            (
                d
                for d in registry.all()
                if d.form == WORKER_DEPLOYMENT and d.uid != self_uid and worker_of(d.spec) == worker.uid
            ),
            None,
        )
        if other is not None:
            return Problem(
                "dependency_conflict",
                f"worker {worker.uid} already has the WorkerDeployment {other.uid}",
            )
        for uid, _ in weighted(spec):
            version, problem = resolve(registry, {"resourceUid": uid}, WORKER_VERSION, "version")
            if problem:
                return problem
            assert version is not None
            if worker_of(version.spec) != worker.uid:
                return Problem(
                    "dependency_conflict",
                    f"version {uid} belongs to worker {worker_of(version.spec)}, not to {worker.uid}",
                )
            fitness = version_fitness(registry, version, worker)
            if isinstance(fitness, Problem):  # known to fail: before side effects (WF-5)
                return fitness
        return None

    def completion(self, kind: str, registry: Registry, resource: ResourceView) -> str:
        if kind == "delete":
            return "now"
        return "now" if self.settle(kind, registry, resource) == "succeeded" else "await"

    def settle(self, kind: str, registry: Registry, resource: ResourceView) -> str | Problem:
        """ "wait" while a weighted Version verifies; then "succeeded" or why the change fails."""
        worker = registry.get(str(worker_of(resource.spec)))
        if worker is None:
            return Problem("dependency_conflict", f"worker {worker_of(resource.spec)}: not found")
        failure: Problem | None = None
        for uid, _ in weighted(resource.spec):
            version = registry.get(uid)
            if version is None or version.form != WORKER_VERSION:
                # A Version whose verification failed is gone: its create left no Resource.
                failure = failure or Problem(
                    "dependency_conflict",
                    f"version {uid}: not found (its verification failed or it was deleted)",
                )
                continue
            fitness = version_fitness(registry, version, worker)
            if fitness == "pending":
                return "wait"
            if isinstance(fitness, Problem):
                failure = failure or fitness
        return failure or "succeeded"
