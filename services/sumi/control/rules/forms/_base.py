"""The generic Resource machinery every Form plugs into.

A Form is pure: it validates a spec's shape, checks references against the
Space's registry, guards updates and deletes. It imports no Kafka, Postgres or
HTTP code, so its rules are unit-testable alone.
"""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sumi.core.problems import FieldError, Problem

FORM_BASE = "https://edge.forms.takoform.com/forms/"
# host-api.md's `^…$` ends at the end of the string; Python's `$` also matches before a
# trailing newline ("q\n" would pass), so the compiled patterns end in `\Z`.
NAME_PATTERN = "^[a-z0-9][a-z0-9-]{0,62}$"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}\Z")


def form_url(name: str, version: str) -> str:
    return f"{FORM_BASE}{name}/{version}/"


@dataclass(frozen=True)
class ResourceView:
    """What the control processor knows of one not-deleted Resource."""

    uid: str
    name: str
    form: str
    spec: Mapping[str, Any]
    state: str  # creating | active | updating | deleting
    generation: int
    observed: Mapping[str, Any] = field(default_factory=dict)


class Registry(Protocol):
    """One Space's live Resources, as the processor folded them from the log."""

    def get(self, uid: str) -> ResourceView | None: ...

    def all(self) -> Iterable[ResourceView]: ...


class Form(Protocol):
    url: str

    def validate_spec(self, spec: object) -> list[FieldError]:
        """Shape and ranges of the whole spec (closed objects, required fields)."""

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
        """Immutability rules of a PUT (new is already shape-valid)."""

    def check_references(self, registry: Registry, spec: Mapping[str, Any], self_uid: str | None) -> Problem | None:
        """References, uniqueness and graph rules against the Space (create and update)."""

    def check_delete(self, registry: Registry, resource: ResourceView) -> Problem | None:
        """Dependents that block a delete."""

    def completion(self, kind: str, registry: Registry, resource: ResourceView) -> str:
        """ "now" when an accepted create/update/delete takes effect in the control log itself;
        "await" when a service owning an outside effect must report it (operation.report)."""

    def initial_observed(self, spec: Mapping[str, Any]) -> dict[str, Any] | None:
        """The observed a Resource shows from its create on (None: nothing observed yet)."""

    def settle(self, kind: str, registry: Registry, resource: ResourceView) -> "str | Problem":
        """For an awaited Operation that waits on other Resources rather than on a service:
        "wait", "succeeded", or the Problem it fails with. Asked whenever an awaited
        Operation of the Space ends (operation.report)."""

    def reported(
        self, registry: Registry, resource: ResourceView, observed: Mapping[str, Any], now: int
    ) -> dict[str, Any]:
        """The observed to record when a service reports one (`resource.observe`): the
        report itself, or the report merged with what the control plane knows itself."""


class BaseForm:
    """Defaults for Forms that have no references and no dependents of their own."""

    url = ""

    def validate_spec(self, spec: object) -> list[FieldError]:
        return []

    def check_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldError]:
        return []

    def check_references(self, registry: Registry, spec: Mapping[str, Any], self_uid: str | None) -> Problem | None:
        return None

    def check_delete(self, registry: Registry, resource: ResourceView) -> Problem | None:
        return None

    def completion(self, kind: str, registry: Registry, resource: ResourceView) -> str:
        return "now"

    def initial_observed(self, spec: Mapping[str, Any]) -> dict[str, Any] | None:
        return None

    def settle(self, kind: str, registry: Registry, resource: ResourceView) -> "str | Problem":
        return "wait"

    def reported(
        self, registry: Registry, resource: ResourceView, observed: Mapping[str, Any], now: int
    ) -> dict[str, Any]:
        return dict(observed)


# ---- shape helpers -------------------------------------------------------------------------


def closed_object(
    value: object, path: str, required: Iterable[str], optional: Iterable[str] = ()
) -> tuple[dict[str, Any], list[FieldError]]:
    """A JSON object with exactly the allowed keys; returns it and the errors found."""
    if not isinstance(value, dict):
        return {}, [FieldError(path or "/", "must be an object")]
    required = list(required)
    allowed = set(required) | set(optional)
    errors = [FieldError(f"{path}/{k}", "unknown field") for k in value if k not in allowed]
    errors += [FieldError(f"{path}/{k}", "required") for k in required if k not in value]
    return value, errors


def integer_in(value: object, path: str, low: int, high: int) -> list[FieldError]:
    # bool is an int in Python and 1.0 is not an integer in this contract.
    if isinstance(value, bool) or not isinstance(value, int):
        return [FieldError(path, f"must be an integer {low}..{high}")]
    if not low <= value <= high:
        return [FieldError(path, f"must be between {low} and {high}")]
    return []


def reference_shape(value: object, path: str) -> list[FieldError]:
    """QC-11 / WF-1: exactly {"resourceUid": "<non-empty string>"}."""
    ref, errors = closed_object(value, path, ["resourceUid"])
    if not errors and (not isinstance(ref["resourceUid"], str) or not ref["resourceUid"]):
        errors.append(FieldError(f"{path}/resourceUid", "must be a non-empty string"))
    return errors


def resolve(
    registry: Registry, ref: Mapping[str, Any], expected_form: str, what: str
) -> tuple[ResourceView | None, Problem | None]:
    """QC-14, QC-18, WF-2: the reference exists in this Space, has the exact Form, is not deleting.

    Another Space's Resource is simply not in this registry, so it reads as "not found",
    revealing nothing (host-api.md section 6)."""
    target = registry.get(str(ref["resourceUid"]))
    if target is None:
        return None, Problem("dependency_conflict", f"{what} {ref['resourceUid']}: not found")
    if target.form != expected_form:
        return None, Problem(
            "dependency_conflict", f"{what} {target.uid}: is a {target.form}, expected {expected_form}"
        )
    if target.state == "deleting":
        return None, Problem("dependency_conflict", f"{what} {target.uid}: is being deleted")
    return target, None


def referencing(registry: Registry, uid: str, forms: Iterable[str] | None = None) -> list[ResourceView]:
    """Every live Resource whose spec holds {"resourceUid": uid} anywhere."""
    wanted = set(forms) if forms is not None else None
    return [r for r in registry.all() if (wanted is None or r.form in wanted) and uid in _uids_in(r.spec)]


def _uids_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        found = {value["resourceUid"]} if isinstance(value.get("resourceUid"), str) else set()
        for v in value.values():
            found |= _uids_in(v)
        return found
    if isinstance(value, list):
        return set().union(*(_uids_in(v) for v in value)) if value else set()
    return set()
