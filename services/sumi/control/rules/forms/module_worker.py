"""ModuleWorker 0.3.0 (forms.md): the identity of one worker script."""

from collections.abc import Mapping
from typing import Any

from sumi.control.rules.forms._base import BaseForm, Registry, ResourceView, closed_object, referencing
from sumi.control.rules.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE_CONSUMER,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.core.problems import FieldError, Problem

KNOWN_HANDLERS = ("queue",)


class ModuleWorker(BaseForm):
    url = MODULE_WORKER

    def validate_spec(self, spec: object) -> list[FieldError]:
        spec, errors = closed_object(spec, "/spec", ["runtime", "handlers"])
        if "runtime" in spec and spec["runtime"] not in ("javascript", "python"):
            errors.append(FieldError("/spec/runtime", 'must be "javascript" or "python"'))
        handlers = spec.get("handlers")
        if "handlers" in spec:
            if not isinstance(handlers, list):
                errors.append(FieldError("/spec/handlers", "must be an array"))
            else:
                for i, h in enumerate(handlers):
                    if h not in KNOWN_HANDLERS:
                        errors.append(FieldError(f"/spec/handlers/{i}", 'must be "queue"'))
                if len(set(map(str, handlers))) != len(handlers):
                    errors.append(FieldError("/spec/handlers", "must not repeat a handler"))
        return errors

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
        # Versions were verified against the runtime they were written for.
        if old.get("runtime") != new.get("runtime"):
            return [FieldError("/spec/runtime", "is immutable")]
        return []

    def check_delete(self, registry: Registry, resource: ResourceView) -> Problem | None:
        users = referencing(
            registry, resource.uid, [WORKER_VERSION, WORKER_DEPLOYMENT, QUEUE_CONSUMER, DURABLE_WORKFLOW]
        )
        if users:
            return Problem(
                "dependency_conflict", f"worker {resource.uid} is referenced by {users[0].form} {users[0].uid}"
            )
        return None
