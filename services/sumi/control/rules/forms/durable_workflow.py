"""DurableWorkflow 0.3.0: one Workflow class exported by a ModuleWorker, with its instance-ID space.

Pure rules only (WF-1..12, WF-17; observed WF-9). Instances are the workflow
engine's (`sumi.workflow`); this Form decides what may be created and when the
control plane takes a Workflow to be Ready.

- Create checks every Version a new instance could run on before accepting
  (WF-4): the active allocation and the allocations that accepted, unfinished
  Deployment creates/updates will apply. An established incompatibility is
  `dependency_conflict` (WF-5); a Version still verifying is `resource_busy`
  (WF-6), never taken as incompatible; no Deployment at all is allowed (WF-7).
  An established failure wins over a pending one: the create could never
  succeed, so "retry later" would be a wrong answer.
- Create and update take effect in the control log itself. A delete is awaited
  (WF-13, WF-14): the workflow engine closes intake, fences the owner, stops
  every context and purges every instance, then reports with
  `operation.report` (`reconciling` while the stop is unproven).
- observed (WF-9) is `{"ready", "instanceCounts", "observedAt"}`. `ready`
  is what the control plane knows: the worker's allocation in force weights
  only verified Versions exporting the class. The counts are the engine's
  (reported with `resource.observe`); the control plane knows them only at
  create (all zero: the UID is new) and keeps the last reported ones. Each
  engine replica reports the partitions of the instance log it owns, one
  report per partition: the control plane keeps each partition's latest
  (`InstanceCountsObserved`, in no observed a client reads) and observes their
  sum, so the counts are exact whichever replica owns which partition.
"""

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sumi.control.rules.forms._base import (
    BaseForm,
    Registry,
    ResourceView,
    closed_object,
    reference_shape,
    resolve,
)
from sumi.control.rules.forms.names import DURABLE_WORKFLOW, MODULE_WORKER, WORKER_VERSION
from sumi.control.rules.forms.worker_deployment import active_allocation, allocations_to_check
from sumi.control.rules.forms.worker_version import class_fitness, worker_of
from sumi.core.problems import FieldError, Problem
from sumi.core.times import rfc3339

# WF-1; fullmatch, so a trailing newline is not let through as `$` would.
CLASS_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]{0,63}")
STATUSES = ("queued", "running", "sleeping", "waiting", "complete", "errored", "terminated")  # WF-21
IMMUTABLE = ("worker", "className")  # WF-11
# Intake is open while the Resource is live; `deleting` closes it (WF-13).
LIVE = ("active", "updating")


class DurableWorkflow(BaseForm):
    url = DURABLE_WORKFLOW

    def validate_spec(self, spec: object) -> list[FieldError]:
        # WF-1: exactly these two, no defaults, the reference closed.
        spec, errors = closed_object(spec, "/spec", IMMUTABLE)
        if "worker" in spec:
            errors += reference_shape(spec["worker"], "/spec/worker")
        if "className" in spec:
            name = spec["className"]
            if not isinstance(name, str) or not CLASS_NAME.fullmatch(name):
                errors.append(FieldError("/spec/className", "must match ^[A-Za-z_$][A-Za-z0-9_$]{0,63}$"))
        return errors

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
        why = "is immutable: code is promoted through the worker's Deployment"
        return [FieldError(f"/spec/{name}", why) for name in IMMUTABLE if old.get(name) != new.get(name)]

    def check_references(self, registry: Registry, spec: Mapping[str, Any], self_uid: str | None) -> Problem | None:
        worker, problem = resolve(registry, spec["worker"], MODULE_WORKER, "worker")  # WF-2
        if problem or self_uid is not None:
            # An update keeps worker and className (check_update): nothing new to judge.
            return problem
        assert worker is not None
        return _class_problem(registry, worker.uid, spec["className"])

    def check_delete(self, registry: Registry, resource: ResourceView) -> Problem | None:
        # WF-12: any not-deleted Version, weighted or not, verifying or verified.
        for version in registry.all():
            if version.form == WORKER_VERSION and resource.uid in _bound_workflows(version.spec):
                return Problem(
                    "dependency_conflict",
                    f"workflow {resource.uid} is bound by WorkerVersion {version.uid} (workflowBindings)",
                )
        return None

    def completion(self, kind: str, registry: Registry, resource: ResourceView) -> str:
        # WF-13, WF-14: only the workflow engine can prove the stop and the purge.
        return "await" if kind == "delete" else "now"

    def reported(
        self, registry: Registry, resource: ResourceView, observed: Mapping[str, Any], now: int
    ) -> dict[str, Any]:
        """The engine reports instance counts; `ready` stays the control plane's judgement."""
        return workflow_observed(registry, resource, now, observed.get("instanceCounts"))


def _class_problem(registry: Registry, worker_uid: str, class_name: str) -> Problem | None:
    """WF-4..7 over every allocation a new instance could run on."""
    pending: Problem | None = None
    for allocation in allocations_to_check(registry, worker_uid):
        for uid, _ in allocation:
            version = registry.get(uid)
            if version is None or version.form != WORKER_VERSION:
                continue  # its verification failed: the Deployment change weighting it fails too
            fitness = class_fitness(version, class_name)
            if isinstance(fitness, Problem):
                return fitness
            if fitness == "pending" and pending is None:
                pending = Problem(
                    "resource_busy",
                    f"version {uid} of worker {worker_uid} is still verifying; "
                    f"whether it exports {class_name!r} is not known yet: retry later",
                )
    return pending


def _bound_workflows(version_spec: Mapping[str, Any]) -> set[str]:
    return {b["resource"]["resourceUid"] for b in version_spec.get("workflowBindings", [])}


def is_ready(registry: Registry, workflow: ResourceView) -> bool:
    """WF-3, WF-9: new instances can be accepted and run: intake open, and the worker's
    allocation in force weights only verified Versions exporting the class."""
    if workflow.state not in LIVE:
        return False
    allocation = active_allocation(registry, str(worker_of(workflow.spec)))
    if not allocation:
        return False
    class_name = str(workflow.spec["className"])
    for uid, _ in allocation:
        version = registry.get(uid)
        if version is None or class_fitness(version, class_name) != "ok":
            return False
    return True


def workflow_observed(registry: Registry, workflow: ResourceView, now: int, counts: Any = None) -> dict[str, Any]:
    """WF-9's observed: `ready`, a count for each of the seven statuses, `observedAt`."""
    if not isinstance(counts, Mapping):
        counts = workflow.observed.get("instanceCounts")
    return {
        "ready": is_ready(registry, workflow),
        "instanceCounts": counts_of(counts),
        "observedAt": rfc3339(now),
    }


def counts_of(counts: Any) -> dict[str, int]:
    """A count for each of the seven statuses (absent or malformed: 0)."""
    if not isinstance(counts, Mapping):
        counts = {}
    return {s: _count(counts.get(s)) for s in STATUSES}


def summed(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """The Workflow's counts: the sum of its partitions' (WF-9)."""
    total = dict.fromkeys(STATUSES, 0)
    for part in parts:
        for status, n in counts_of(part).items():
            total[status] += n
    return total


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def observations(after: Registry, touched: Iterable[str], now: int) -> list[tuple[str, dict[str, Any]]]:
    """New observed of every DurableWorkflow whose readiness a decision may have changed:
    the Workflows it touched and those on a worker whose Versions or Deployment it touched.
    Only a change of `ready` (or a first observation) makes a new record."""
    touched = set(touched)
    workers = set(touched)
    for uid in touched:
        resource = after.get(uid)
        if resource is not None and worker_of(resource.spec):
            workers.add(str(worker_of(resource.spec)))
    out = []
    for workflow in after.all():
        if workflow.form != DURABLE_WORKFLOW or not (workflow.uid in touched or worker_of(workflow.spec) in workers):
            continue
        observed = workflow_observed(after, workflow, now)
        if workflow.observed.get("ready") is not observed["ready"] or "instanceCounts" not in workflow.observed:
            out.append((workflow.uid, observed))
    return out
