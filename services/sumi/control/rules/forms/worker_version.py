"""WorkerVersion 0.5.0 (forms.md): one immutable upload of a worker's code and environment.

The create is accepted here and then awaited: the verifier service
(`sumi.verifier`) loads the main module once in a sandbox and reports
what it exports with `operation.report`. Until then the Version is "verifying":
state `creating`, observed `{"verified": false}`.
"""

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from sumi.control.rules.forms._base import (
    BaseForm,
    Registry,
    ResourceView,
    closed_object,
    reference_shape,
    referencing,
    resolve,
)
from sumi.control.rules.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.core.canonical import canonical
from sumi.core.problems import FieldError, Problem

BINDING_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")  # \Z, not $: see _base.NAME_RE
MAX_MODULES_BYTES = 10 * 1024 * 1024
MAX_MODULE_NAME = 256
EXTENSIONS = {"javascript": (".js", ".mjs"), "python": (".py",)}
ALL_EXTENSIONS = (".js", ".mjs", ".py")


def module_name_error(name: object) -> str | None:
    """A relative path: no leading '/', no empty, '.' or '..' segments, a code extension."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > MAX_MODULE_NAME:
        return f"must be at most {MAX_MODULE_NAME} characters"
    if name.startswith("/") or "\\" in name:
        return "must be a relative path with '/' separators"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "must not hold empty, '.' or '..' segments"
    if PurePosixPath(name).suffix not in ALL_EXTENSIONS:
        return "must end in .js, .mjs or .py"
    return None


def _modules_errors(modules: object) -> list[FieldError]:
    if not isinstance(modules, list) or not modules:
        return [FieldError("/spec/modules", "must be a non-empty array")]
    errors: list[FieldError] = []
    seen: set[str] = set()
    total = 0
    for i, module in enumerate(modules):
        path = f"/spec/modules/{i}"
        module, errs = closed_object(module, path, ["name", "content"])
        errors += errs
        if "name" in module:
            problem = module_name_error(module["name"])
            if problem:
                errors.append(FieldError(f"{path}/name", problem))
            elif module["name"] in seen:
                errors.append(FieldError(f"{path}/name", "repeats another module's name"))
            else:
                seen.add(module["name"])
        if "content" in module:
            if not isinstance(module["content"], str):
                errors.append(FieldError(f"{path}/content", "must be a string"))
            else:
                total += len(module["content"].encode("utf-8", "surrogatepass"))
    if total > MAX_MODULES_BYTES:
        errors.append(
            FieldError(
                "/spec/modules",
                f"total module size is {total} bytes; the limit is {MAX_MODULES_BYTES}",
            )
        )
    return errors


def _bindings_errors(spec: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    names: dict[str, str] = {}

    def name_ok(name: Any, path: str) -> None:
        if not isinstance(name, str) or not BINDING_RE.match(name):
            errors.append(FieldError(path, "must match ^[A-Za-z_][A-Za-z0-9_]{0,63}$"))
        elif name in names:
            errors.append(FieldError(path, f"repeats the binding name at {names[name]}"))
        else:
            names[name] = path

    if "vars" in spec:
        if not isinstance(spec["vars"], dict):
            errors.append(FieldError("/spec/vars", "must be an object of strings"))
        else:
            for k, v in spec["vars"].items():
                name_ok(k, f"/spec/vars/{k}")
                if not isinstance(v, str):
                    errors.append(FieldError(f"/spec/vars/{k}", "must be a string"))
    for key, target in (("queueBindings", "queue"), ("workflowBindings", "resource")):
        if key not in spec:
            continue
        if not isinstance(spec[key], list):
            errors.append(FieldError(f"/spec/{key}", "must be an array"))
            continue
        for i, binding in enumerate(spec[key]):
            path = f"/spec/{key}/{i}"
            binding, errs = closed_object(binding, path, ["name", target])
            errors += errs
            if "name" in binding:
                name_ok(binding["name"], f"{path}/name")
            if target in binding:
                errors += reference_shape(binding[target], f"{path}/{target}")
    return errors


def worker_of(spec: Mapping[str, Any]) -> str | None:
    """The worker UID a Version's (or Deployment's) spec names."""
    worker = spec.get("worker")
    return worker.get("resourceUid") if isinstance(worker, Mapping) else None


def load_fitness(version: ResourceView) -> str | Problem:
    """ "pending" while the Version verifies, "ok" once its main module loaded, else why not.

    Pending verification is never taken as incompatibility (WF-6)."""
    observed = version.observed
    if observed.get("verified") is not True:
        return "pending"
    if observed.get("loadError"):
        return Problem("dependency_conflict", f"version {version.uid} does not load: {observed['loadError']}")
    return "ok"


def class_fitness(version: ResourceView, class_name: str) -> str | Problem:
    """As `load_fitness`, and the main module exports `class_name` as a Workflow class
    (WF-28: constructible, with a callable `run`)."""
    loaded = load_fitness(version)
    if loaded != "ok":
        return loaded
    if class_name not in (version.observed.get("workflowClasses") or ()):
        return Problem(
            "dependency_conflict", f"version {version.uid} does not export the workflow class {class_name!r}"
        )
    return "ok"


class WorkerVersion(BaseForm):
    url = WORKER_VERSION

    def validate_spec(self, spec: object) -> list[FieldError]:
        spec, errors = closed_object(
            spec,
            "/spec",
            ["worker", "mainModule", "modules"],
            ["vars", "queueBindings", "workflowBindings"],
        )
        if "worker" in spec:
            errors += reference_shape(spec["worker"], "/spec/worker")
        if "modules" in spec:
            errors += _modules_errors(spec["modules"])
        if "mainModule" in spec:
            main = spec["mainModule"]
            if not isinstance(main, str) or not main:
                errors.append(FieldError("/spec/mainModule", "must be a non-empty string"))
            elif (
                isinstance(spec.get("modules"), list)
                and spec["modules"]
                and main not in {m.get("name") for m in spec["modules"] if isinstance(m, dict)}
            ):
                errors.append(FieldError("/spec/mainModule", "must name one of the modules"))
        errors += _bindings_errors(spec)
        return errors

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
        # Immutable: a PUT is accepted only with exactly the same spec.
        keys = sorted(set(old) | set(new))
        changed = [k for k in keys if canonical(old.get(k)) != canonical(new.get(k))]
        return [FieldError(f"/spec/{k}", "a WorkerVersion is immutable") for k in changed]

    def check_references(self, registry: Registry, spec: Mapping[str, Any], self_uid: str | None) -> Problem | None:
        if self_uid is not None:
            return None  # an identical PUT (check_update): nothing new is referenced
        worker, problem = resolve(registry, spec["worker"], MODULE_WORKER, "worker")
        if problem:
            return problem
        assert worker is not None
        runtime = worker.spec.get("runtime", "javascript")
        allowed = EXTENSIONS.get(runtime, ())
        wrong = [
            FieldError(
                f"/spec/modules/{i}/name",
                f"a {runtime} worker's modules end in {' or '.join(allowed)}",
            )
            for i, m in enumerate(spec["modules"])
            if PurePosixPath(m["name"]).suffix not in allowed
        ]
        if wrong:
            return Problem("invalid_spec", f"the modules do not fit worker {worker.uid}'s runtime", wrong)
        for binding in spec.get("queueBindings", []):
            _, problem = resolve(registry, binding["queue"], QUEUE, f"queue of binding {binding['name']}")
            if problem:
                return problem
        for binding in spec.get("workflowBindings", []):
            _, problem = resolve(
                registry,
                binding["resource"],
                DURABLE_WORKFLOW,
                f"workflow of binding {binding['name']}",
            )
            if problem:
                return problem
        return None

    def check_delete(self, registry: Registry, resource: ResourceView) -> Problem | None:
        users = referencing(registry, resource.uid, [WORKER_DEPLOYMENT])
        if users:
            return Problem(
                "dependency_conflict",
                f"version {resource.uid} is weighted by WorkerDeployment {users[0].uid}",
            )
        return None

    def completion(self, kind: str, registry: Registry, resource: ResourceView) -> str:
        # The verifier reports the create; an identical PUT and a delete take effect at once.
        return "await" if kind == "create" else "now"

    def initial_observed(self, spec: Mapping[str, Any]) -> dict[str, Any] | None:
        return {"verified": False}
