"""Properties of every Form's spec validator (services/sumi/control/rules/forms/).

For each Form: any JSON value as a spec is answered, never raised on; through the
control decisions it becomes an accepted create or a rejected one with a Problem
(never another exception); every valid spec is accepted; and the edges of each range
are where the Form says they are.
"""

import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sumi.control import ControlState
from sumi.control.rules.forms import FORMS
from sumi.control.rules.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE,
    QUEUE_CONSUMER,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.control.rules.forms.queue_consumer import RANGES
from sumi.control.rules.forms.worker_deployment import MAX_ENTRIES
from sumi.control.rules.forms.worker_version import MAX_MODULE_NAME, MAX_MODULES_BYTES
from sumi.core.problems import STATUS, FieldError
from tests.decisions_kit import command, problem, reply, run

# Per Form, half of Hypothesis's default examples: the parametrized properties below run
# once per Form, and the suite's time is a budget too.
PER_FORM = settings(max_examples=50)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

# ---- a Space with something to refer to --------------------------------------------------


def world() -> tuple[ControlState, dict[str, str]]:
    """A Space "demo" holding two queues, a JavaScript worker and two of its Versions.

    Command IDs are fixed, so every world has the same UIDs."""
    s = ControlState()
    run(s, command("space.create", {"name": "demo"}, cid="world-demo"))
    uids = {
        "q": _create(s, "q", QUEUE, {"retentionSeconds": 3600}),
        "q2": _create(s, "q2", QUEUE, {"retentionSeconds": 3600}),
        "w": _create(s, "w", MODULE_WORKER, {"runtime": "javascript", "handlers": ["queue"]}),
    }
    for v in ("v1", "v2"):
        spec = {
            "worker": {"resourceUid": uids["w"]},
            "mainModule": "a.js",
            "modules": [{"name": "a.js", "content": ""}],
        }
        uids[v] = _create(s, v, WORKER_VERSION, spec)
    return s, uids


def _create(s: ControlState, name: str, form: str, spec: Any) -> str:
    cmd = command("resource.create", {"name": name, "form": form, "spec": spec}, cid=f"world-{name}")
    assert reply(run(s, cmd)).accepted
    found = s.space("demo").by_ref(name)
    assert found is not None
    return found.uid


def create(s: ControlState, form: str, spec: Any) -> list[Any]:
    return run(s, command("resource.create", {"name": "subject", "form": form, "spec": spec}))


def ref(uid: str) -> dict[str, str]:
    return {"resourceUid": uid}


# ---- valid specs, per Form (given the world's UIDs) -------------------------------------

CODE_NAME = st.text(string.ascii_lowercase + string.digits + "_-", min_size=1, max_size=12)
BINDING = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


def queue_specs(_: dict[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"retentionSeconds": st.integers(60, 1_209_600)})


def worker_specs(_: dict[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"runtime": st.sampled_from(["javascript", "python"]), "handlers": st.lists(st.just("queue"), max_size=1)}
    )


def consumer_specs(u: dict[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    settings = {name: st.integers(low, high) for name, (low, high) in RANGES.items()}
    return st.fixed_dictionaries(
        {"queue": st.just(ref(u["q"])), "worker": st.just(ref(u["w"])), **settings},
        optional={"deadLetterQueue": st.just(ref(u["q2"]))},
    )


@st.composite
def version_specs(draw: st.DrawFn, u: dict[str, str]) -> dict[str, Any]:
    stems = draw(st.lists(st.lists(CODE_NAME, min_size=1, max_size=3), min_size=1, max_size=4, unique_by=tuple))
    names = ["/".join(parts) + draw(st.sampled_from([".js", ".mjs"])) for parts in stems]
    modules = [{"name": n, "content": draw(st.text(max_size=20))} for n in names]
    bindings = draw(st.lists(BINDING, max_size=4, unique=True))
    split = draw(st.integers(0, len(bindings)))
    spec: dict[str, Any] = {"worker": ref(u["w"]), "mainModule": draw(st.sampled_from(names)), "modules": modules}
    if split or draw(st.booleans()):
        spec["vars"] = {name: draw(st.text(max_size=8)) for name in bindings[:split]}
    if len(bindings) > split or draw(st.booleans()):
        spec["queueBindings"] = [{"name": name, "queue": ref(u["q"])} for name in bindings[split:]]
    return spec


@st.composite
def deployment_specs(draw: st.DrawFn, u: dict[str, str]) -> dict[str, Any]:
    versions = draw(st.lists(st.sampled_from([u["v1"], u["v2"]]), min_size=1, max_size=2, unique=True))
    cut = draw(st.integers(1, 99)) if len(versions) == 2 else 100
    weights = [cut, 100 - cut][: len(versions)]
    return {
        "worker": ref(u["w"]),
        "versions": [{"version": ref(v), "percentage": p} for v, p in zip(versions, weights, strict=True)],
    }


def workflow_specs(u: dict[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    # WF-1; the world's worker has no Deployment, so any class may be named (WF-7).
    return st.fixed_dictionaries(
        {"worker": st.just(ref(u["w"])), "className": st.from_regex(r"\A[A-Za-z_$][A-Za-z0-9_$]{0,63}\Z")}
    )


VALID: dict[str, Callable[[dict[str, str]], st.SearchStrategy[dict[str, Any]]]] = {
    DURABLE_WORKFLOW: workflow_specs,
    QUEUE: queue_specs,
    MODULE_WORKER: worker_specs,
    QUEUE_CONSUMER: consumer_specs,
    WORKER_VERSION: version_specs,
    WORKER_DEPLOYMENT: deployment_specs,
}


def test_every_form_is_covered() -> None:
    # A new Form gets its valid-spec strategy here.
    assert set(VALID) == set(FORMS)


# ---- any spec: answered, never raised on ------------------------------------------------


def _well_formed(errors: list[FieldError]) -> bool:
    return all(isinstance(e, FieldError) and e.path.startswith("/spec") and e.message for e in errors)


@pytest.mark.parametrize("form", sorted(FORMS))
@PER_FORM
@given(spec=JSON)
def test_any_json_value_is_answered_with_field_errors(form: str, spec: Any) -> None:
    errors = FORMS[form].validate_spec(spec)
    assert isinstance(errors, list) and _well_formed(errors)
    if not isinstance(spec, dict):
        assert errors and errors[0].path == "/spec"


@st.composite
def mutated(draw: st.DrawFn, form: str) -> dict[str, Any]:
    """A valid spec with one field replaced by any JSON value, dropped, or one key added."""
    _, u = WORLD
    spec = dict(draw(VALID[form](u)))
    key = draw(st.sampled_from(sorted(spec)))
    how = draw(st.sampled_from(["replace", "drop", "add"]))
    if how == "replace":
        spec[key] = draw(JSON)
    elif how == "drop":
        del spec[key]
    else:
        spec[draw(st.text(min_size=1, max_size=8))] = draw(JSON)
    return spec


WORLD = world()


@pytest.mark.parametrize("form", sorted(VALID))
@PER_FORM
@given(data=st.data())
def test_a_broken_spec_is_a_problem_never_an_exception(form: str, data: st.DataObject) -> None:
    s, _ = world()
    spec = data.draw(st.one_of(mutated(form), JSON))
    events = create(s, form, spec)  # raises nothing: the decision answers every spec
    decided = reply(events)
    if not isinstance(spec, dict):
        # Not an object: the command itself does not decode (as over HTTP: "spec must be an object").
        assert not decided.accepted and problem(events)["code"] == "invalid_request"
        return
    if not decided.accepted:
        p = problem(events)
        assert p["code"] in {"invalid_spec", "dependency_conflict"}, p
        assert p["code"] != "invalid_spec" or p["errors"], p  # an invalid spec says where
        assert p["code"] in STATUS
    if FORMS[form].validate_spec(spec):
        assert not decided.accepted and problem(events)["code"] == "invalid_spec"


# ---- valid specs: accepted ---------------------------------------------------------------


@pytest.mark.parametrize("form", sorted(VALID))
@PER_FORM
@given(data=st.data())
def test_a_valid_spec_is_accepted(form: str, data: st.DataObject) -> None:
    s, u = world()
    spec = data.draw(VALID[form](u))
    assert FORMS[form].validate_spec(spec) == []
    events = create(s, form, spec)
    assert reply(events).accepted, events
    assert s.space("demo").by_ref("subject") is not None


# ---- the edges ---------------------------------------------------------------------------

# (Form, field, lowest, highest) of every integer range a spec holds at its top level.
RANGES_AT_TOP = [(QUEUE, "retentionSeconds", 60, 1_209_600)] + [
    (QUEUE_CONSUMER, name, low, high) for name, (low, high) in RANGES.items()
]


@pytest.mark.parametrize("form, field, low, high", RANGES_AT_TOP)
@PER_FORM
@given(data=st.data())
def test_integer_ranges_are_inclusive_at_both_edges(
    form: str, field: str, low: int, high: int, data: st.DataObject
) -> None:
    _, u = WORLD
    spec = dict(data.draw(VALID[form](u)))
    inside = data.draw(st.integers(low, high) | st.sampled_from([low, high]))
    outside = data.draw(
        st.integers(max_value=low - 1) | st.integers(min_value=high + 1) | st.sampled_from([low - 1, high + 1])
    )
    wrong_type = data.draw(st.sampled_from([True, False, float(low), str(low), None, [low]]))

    def paths(value: Any) -> list[str]:
        return [e.path for e in FORMS[form].validate_spec({**spec, field: value})]

    assert paths(inside) == []
    assert paths(outside) == [f"/spec/{field}"]
    assert paths(wrong_type) == [f"/spec/{field}"]  # 1.0 and true are not integers here


@given(data=st.data())
def test_deployment_percentages_sum_to_100_over_1_to_10_entries(data: st.DataObject) -> None:
    count = data.draw(st.integers(1, MAX_ENTRIES + 2))
    weights = data.draw(st.lists(st.integers(1, 100), min_size=count, max_size=count))
    spec = {
        "worker": ref("res_w"),
        "versions": [{"version": ref(f"res_v{i}"), "percentage": p} for i, p in enumerate(weights)],
    }
    paths = [e.path for e in FORMS[WORKER_DEPLOYMENT].validate_spec(spec)]
    if count > MAX_ENTRIES:
        assert paths == ["/spec/versions"]
    elif sum(weights) == 100:
        assert paths == []
    else:
        assert paths == ["/spec/versions"]


def test_deployment_percentage_edges() -> None:
    def paths(*weights: Any) -> list[str]:
        spec = {
            "worker": ref("res_w"),
            "versions": [{"version": ref(f"res_v{i}"), "percentage": p} for i, p in enumerate(weights)],
        }
        return [e.path for e in FORMS[WORKER_DEPLOYMENT].validate_spec(spec)]

    assert paths(100) == [] and paths(1, 99) == []
    assert paths(0, 100) == ["/spec/versions/0/percentage"]
    assert paths(101) == ["/spec/versions/0/percentage"]
    assert paths(*[10] * MAX_ENTRIES) == []
    assert paths(*[9] * (MAX_ENTRIES + 1) + [1]) == ["/spec/versions"]
    assert paths() == ["/spec/versions"]


@given(name=st.text(string.ascii_lowercase, min_size=1, max_size=MAX_MODULE_NAME + 8))
def test_module_names_are_at_most_256_characters(name: str) -> None:
    module = name[: max(1, len(name) - 3)] + ".js"
    spec = {"worker": ref("res_w"), "mainModule": module, "modules": [{"name": module, "content": ""}]}
    paths = [e.path for e in FORMS[WORKER_VERSION].validate_spec(spec)]
    assert paths == ([] if len(module) <= MAX_MODULE_NAME else ["/spec/modules/0/name"])


# Around the edges of the pattern: any text, valid names with a character before or after.
EDGE_CHARS = st.sampled_from(["", "\n", "\r", " ", "-", ".", "0", "é"]) | st.text(max_size=1)
NEAR_NAMES = st.text(max_size=70) | st.tuples(EDGE_CHARS, BINDING, EDGE_CHARS).map("".join)


@given(name=NEAR_NAMES)
@example(name="A\n")
@example(name="_" * 64)
@example(name="_" * 65)
def test_binding_names_follow_their_pattern(name: str) -> None:
    spec = {
        "worker": ref("res_w"),
        "mainModule": "a.js",
        "modules": [{"name": "a.js", "content": ""}],
        "vars": {name: "x"},
    }
    ok = (
        0 < len(name) <= 64
        and (name[0].isascii() and (name[0].isalpha() or name[0] == "_"))
        and all(c.isascii() and (c.isalnum() or c == "_") for c in name)
    )
    paths = [e.path for e in FORMS[WORKER_VERSION].validate_spec(spec)]
    assert paths == ([] if ok else [f"/spec/vars/{name}"])


def test_total_module_size_edge() -> None:
    def paths(size: int) -> list[str]:
        half = size // 2
        modules = [{"name": "a.js", "content": "x" * half}, {"name": "b.js", "content": "x" * (size - half)}]
        spec = {"worker": ref("res_w"), "mainModule": "a.js", "modules": modules}
        return [e.path for e in FORMS[WORKER_VERSION].validate_spec(spec)]

    assert paths(MAX_MODULES_BYTES) == []
    assert paths(MAX_MODULES_BYTES + 1) == ["/spec/modules"]


@pytest.mark.parametrize("name", ["ok\n", "ok\r", "\nok", "ok ", "Ok", "-ok", "o" * 64])
def test_resource_names_match_the_whole_pattern(name: str) -> None:
    # host-api.md: ^[a-z0-9][a-z0-9-]{0,62}$ over the whole name ("ok\n" once passed).
    s, _ = world()
    p = problem(run(s, command("resource.create", {"name": name, "form": QUEUE, "spec": {"retentionSeconds": 60}})))
    assert p["code"] == "invalid_request" and "^[a-z0-9][a-z0-9-]{0,62}$" in p["detail"], p
