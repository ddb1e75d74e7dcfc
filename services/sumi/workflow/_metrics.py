"""The workflow engine's metrics: step commits (off the records it decides), step call
latencies (from a run's call to its commit), and instances per status (its fold's counts).

Labels are the Space and the Workflow's UID, with the step kind, the outcome and the status:
never an instance ID or a step name, so the series are as many as the Host's Workflows.
"""

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sumi.core import records as r


class WorkflowMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("space", "workflow")
        self.commits = Counter(
            "sumi_workflow_step_commits", "Step attempts committed", (*labels, "kind", "ok"), registry=registry
        )
        self.latency = Histogram(
            "sumi_workflow_step_call_duration_seconds",
            "From a step call of the worker to its answer, its commit included",
            (*labels, "method"),
            registry=registry,
        )
        self.instances = Gauge("sumi_workflow_instances", "Instances by status", (*labels, "status"), registry=registry)

    def observe(self, rec: Any, space: str) -> None:
        if isinstance(rec, r.StepAttemptCommitted):
            self.commits.labels(space, rec.workflowUid, rec.kind, "true" if rec.ok else "false").inc()

    def call(self, space: str, workflow_uid: str, method: str, seconds: float) -> None:
        if method.startswith("step."):
            self.latency.labels(space, workflow_uid, method).observe(seconds)

    def count(self, per: Mapping[str, Mapping[str, int]], space_of: Callable[[str], str]) -> None:
        self.instances.clear()
        for workflow_uid, statuses in per.items():
            for status, n in statuses.items():
                self.instances.labels(space_of(workflow_uid), workflow_uid, status).set(n)
