"""QueueConsumer 0.3.0 Form rules (sumi.control.rules.forms.queue_consumer), through the control decisions;
no broker."""

from typing import Any

import pytest

from sumi.control import ControlState
from sumi.control.rules.forms.names import MODULE_WORKER, QUEUE, QUEUE_CONSUMER
from sumi.core import records as r
from tests.decisions_kit import command, problem, reply, run
from tests.spec_ranges import CONSUMER_RANGES


def cmd(kind: str, payload: dict[str, Any], space: str = "demo") -> r.CommandSubmitted:
    return command(kind, payload, space=space)


decided = reply


def create(s: ControlState, name: str, form: str, spec: Any, space: str = "demo") -> str:
    d = decided(run(s, cmd("resource.create", {"name": name, "form": form, "spec": spec}, space)))
    assert d.accepted, d.problem
    return s.space(space).by_ref(name).uid  # type: ignore[union-attr]


@pytest.fixture
def s() -> ControlState:
    st = ControlState()
    for sp in ("demo", "other"):
        run(st, cmd("space.create", {"name": sp}))
    return st


def world(s: ControlState) -> dict[str, str]:
    return {
        "q": create(s, "q", QUEUE, {"retentionSeconds": 3600}),
        "q2": create(s, "q2", QUEUE, {"retentionSeconds": 3600}),
        "q3": create(s, "q3", QUEUE, {"retentionSeconds": 3600}),
        "w": create(s, "w", MODULE_WORKER, {"runtime": "javascript", "handlers": ["queue"]}),
        "nohandler": create(s, "nh", MODULE_WORKER, {"runtime": "javascript", "handlers": []}),
        "otherq": create(s, "oq", QUEUE, {"retentionSeconds": 3600}, space="other"),
    }


def spec(q: str, w: str, **over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "queue": {"resourceUid": q},
        "worker": {"resourceUid": w},
        "maxBatchSize": 10,
        "maxBatchTimeoutSeconds": 0,
        "maxConcurrency": 2,
        "maxRetries": 3,
        "retryDelaySeconds": 0,
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def consumer(s: ControlState, body: dict[str, Any], name: str = "c") -> list[Any]:
    return run(s, cmd("resource.create", {"name": name, "form": QUEUE_CONSUMER, "spec": body}))


def test_valid_create_succeeds_now(s: ControlState) -> None:
    # QC-37: success of create means the settings were accepted.
    w = world(s)
    events = consumer(s, spec(w["q"], w["w"], deadLetterQueue={"resourceUid": w["q2"]}))
    assert [e.state for e in events if isinstance(e, r.OperationStateChanged)] == ["running", "succeeded"]


@pytest.mark.parametrize("field, low, high", CONSUMER_RANGES)  # QC-4..8
def test_ranges_at_both_edges(s: ControlState, field: str, low: int, high: int) -> None:
    w = world(s)
    for i, ok in enumerate((low, high)):
        assert decided(consumer(s, spec(w["q"], w["w"], **{field: ok}), f"ok{i}")).accepted
        run(s, cmd("resource.delete", {"ref": f"ok{i}"}))
        # a delete is awaited by the engine; end it here as the engine would
        op = next(o for o in s.space("demo").operations.values() if o.kind == "delete" and o.state == "running")
        run(s, cmd("operation.report", {"operationId": op.id, "outcome": "succeeded"}))
    for bad in (low - 1, high + 1, float(low), str(low), True, None):
        body = spec(w["q"], w["w"])
        body[field] = bad
        p = problem(consumer(s, body))
        assert p["code"] == "invalid_spec" and p["errors"][0]["path"] == f"/spec/{field}", (bad, p)


def test_unknown_and_missing_fields_rejected(s: ControlState) -> None:
    # QC-1, QC-10 (no defaults), QC-53
    w = world(s)
    p = problem(consumer(s, {**spec(w["q"], w["w"]), "priority": 1}))
    assert p["code"] == "invalid_spec" and p["errors"][0]["path"] == "/spec/priority"
    for missing in (
        "queue",
        "worker",
        "maxBatchSize",
        "maxBatchTimeoutSeconds",
        "maxConcurrency",
        "maxRetries",
        "retryDelaySeconds",
    ):
        body = spec(w["q"], w["w"])
        del body[missing]
        assert problem(consumer(s, body))["errors"][0]["path"] == f"/spec/{missing}"
    p = problem(
        run(
            s,
            cmd(
                "resource.create",
                {"name": "c", "form": QUEUE_CONSUMER, "spec": spec(w["q"], w["w"]), "privateInputs": {"k": "v"}},
            ),
        )
    )
    assert p["code"] == "invalid_spec"  # QC-10


@pytest.mark.parametrize(
    "ref", [{"resourceUid": "x", "name": "q"}, {}, {"uid": "x"}, "res_x", {"resourceUid": ""}, {"resourceUid": 5}, None]
)
def test_reference_objects_closed(s: ControlState, ref: Any) -> None:
    # QC-11, QC-53
    w = world(s)
    for field in ("queue", "worker", "deadLetterQueue"):
        body = spec(w["q"], w["w"])
        body[field] = ref
        p = problem(consumer(s, body))
        assert p["code"] == "invalid_spec" and p["errors"][0]["path"].startswith(f"/spec/{field}")


def test_reference_checks(s: ControlState) -> None:
    # QC-13, QC-14, QC-18: missing, wrong type, other Space, being deleted.
    w = world(s)
    for body, what in [
        (spec("res_missing", w["w"]), "not found"),
        (spec(w["w"], w["w"]), "expected"),  # a worker is not a queue
        (spec(w["q"], w["q"]), "expected"),
        (spec(w["otherq"], w["w"]), "not found"),
        (spec(w["q"], w["w"], deadLetterQueue={"resourceUid": w["otherq"]}), "not found"),
        (spec(w["q"], w["w"], deadLetterQueue={"resourceUid": w["w"]}), "expected"),
    ]:
        p = problem(consumer(s, body))
        assert p["code"] == "dependency_conflict" and what in p["detail"], p
    run(s, cmd("resource.delete", {"ref": "q3"}))  # a queue delete finishes at once
    p = problem(consumer(s, spec(w["q3"], w["w"])))
    assert p["code"] == "dependency_conflict"


def test_worker_must_declare_queue_handler(s: ControlState) -> None:
    # QC-16
    w = world(s)
    p = problem(consumer(s, spec(w["q"], w["nohandler"])))
    assert p["code"] == "dependency_conflict" and "queue handler" in p["detail"]


def test_one_consumer_per_queue(s: ControlState) -> None:
    # QC-17
    w = world(s)
    assert decided(consumer(s, spec(w["q"], w["w"]), "c1")).accepted
    p = problem(consumer(s, spec(w["q"], w["w"]), "c2"))
    assert p["code"] == "dependency_conflict"


def test_dead_letter_cycles_of_any_length(s: ControlState) -> None:
    # QC-19
    w = world(s)
    p = problem(consumer(s, spec(w["q"], w["w"], deadLetterQueue={"resourceUid": w["q"]})))
    assert p["code"] == "dependency_conflict"  # self-reference
    assert decided(consumer(s, spec(w["q"], w["w"], deadLetterQueue={"resourceUid": w["q2"]}), "a")).accepted
    assert decided(consumer(s, spec(w["q2"], w["w"], deadLetterQueue={"resourceUid": w["q3"]}), "b")).accepted
    p = problem(consumer(s, spec(w["q3"], w["w"], deadLetterQueue={"resourceUid": w["q"]}), "c"))
    assert p["code"] == "dependency_conflict" and "cycle" in p["detail"]  # q -> q2 -> q3 -> q
    assert decided(consumer(s, spec(w["q3"], w["w"]), "c")).accepted
    # an update that would close the cycle is refused too, and changes nothing (QC-20)
    c = s.space("demo").by_ref("c")
    p = problem(
        run(
            s,
            cmd(
                "resource.update", {"ref": "c", "spec": spec(w["q3"], w["w"], deadLetterQueue={"resourceUid": w["q"]})}
            ),
        )
    )
    assert p["code"] == "dependency_conflict"
    assert s.space("demo").by_ref("c") == c


def test_queue_and_worker_immutable_other_fields_updatable(s: ControlState) -> None:
    # QC-2, QC-3, QC-12, QC-40
    w = world(s)
    consumer(s, spec(w["q"], w["w"]))
    w2 = create(s, "w2", MODULE_WORKER, {"runtime": "javascript", "handlers": ["queue"]})
    for body, path in [(spec(w["q2"], w["w"]), "/spec/queue"), (spec(w["q"], w2), "/spec/worker")]:
        p = problem(run(s, cmd("resource.update", {"ref": "c", "spec": body})))
        assert p["code"] == "invalid_spec" and p["errors"][0]["path"] == path
    events = run(
        s,
        cmd(
            "resource.update",
            {"ref": "c", "spec": spec(w["q"], w["w"], maxConcurrency=1, deadLetterQueue={"resourceUid": w["q2"]})},
        ),
    )
    assert decided(events).accepted  # QC-9: a DLQ may be added, changed or removed
    assert s.space("demo").by_ref("c").spec["maxConcurrency"] == 1  # type: ignore[union-attr]
    assert decided(run(s, cmd("resource.update", {"ref": "c", "spec": spec(w["q"], w["w"])}))).accepted


def test_delete_awaits_engine_and_queue_delete_refused_meanwhile(s: ControlState) -> None:
    # QC-41, QC-42, QC-50, QC-51
    w = world(s)
    consumer(s, spec(w["q"], w["w"], deadLetterQueue={"resourceUid": w["q2"]}))
    for ref in ("q", "q2", "w"):
        assert problem(run(s, cmd("resource.delete", {"ref": ref})))["code"] == "dependency_conflict"
    events = run(s, cmd("resource.delete", {"ref": "c"}))
    assert [e.state for e in events if isinstance(e, r.OperationStateChanged)] == ["running"]
    assert s.space("demo").by_ref("c").state == "deleting"  # type: ignore[union-attr]
    # QC-17, QC-48: while its delete is unfinished it still holds the queue
    assert problem(consumer(s, spec(w["q"], w["w"]), "c2"))["code"] == "dependency_conflict"
    op = decided(events).operationId
    run(s, cmd("operation.report", {"operationId": op, "outcome": "succeeded"}))
    assert s.space("demo").by_ref("c") is None
    for ref in ("q", "q2", "w"):
        assert s.space("demo").by_ref(ref) is not None  # QC-50: nothing cascades
    assert decided(run(s, cmd("resource.delete", {"ref": "q"}))).accepted
