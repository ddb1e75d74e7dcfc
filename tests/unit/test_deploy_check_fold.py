"""`sumi deploy --check`'s fold of an instance's history (as the gateway renders it) into what the
engine hands a context: completed steps with their results, unfinished names with their kinds."""

from sumi.cli._check import invocation
from sumi.runtime import StepRecord


def item(type_: str, **data: object) -> dict[str, object]:
    return {"seq": 0, "type": type_, "at": "2026-01-01T00:00:00.000Z", "data": data}


def test_completed_and_pending_steps_as_the_engine_hands_them() -> None:
    # WF-36 (completed names replay their results), WF-35 (unfinished names keep their kinds)
    history = [
        item("InstanceCreated", params={"qty": 2}),
        item("InstanceContextStarted", context=1),
        item("StepAttemptCommitted", name="reserve", kind="do", attempt=1, ok=True, final=True, result={"n": 1}),
        item("StepAttemptCommitted", name="price", kind="do", attempt=1, ok=False, final=False, errorName="E"),
        item("RetryScheduled", name="price", attempt=2),
        item("StepAttemptCommitted", name="price", kind="do", attempt=2, ok=True, final=True, result={"t": 8}),
        item("SleepScheduled", name="cool-down"),
        item("StepAttemptCommitted", name="cool-down", kind="sleep", attempt=1, ok=True, final=True),
        item("WaitScheduled", name="approval", eventType="approved"),
        item("EventAccepted", type="approved", sequence=1),
    ]
    inv = invocation("OrderWorkflow", "o-1", history)
    assert inv.class_name == "OrderWorkflow" and inv.instance_id == "o-1" and inv.params == {"qty": 2}
    assert inv.completed == {
        "reserve": StepRecord("reserve", "do", True, {"n": 1}),
        "price": StepRecord("price", "do", True, {"t": 8}),
        "cool-down": StepRecord("cool-down", "sleep", True, None),
    }
    assert inv.pending_kinds == {"approval": "wait"}


def test_a_failed_final_step_replays_its_error() -> None:
    # WF-36: a completed failure replays as that failure
    history = [
        item("InstanceCreated"),
        item(
            "StepAttemptCommitted",
            name="s",
            kind="do",
            attempt=3,
            ok=False,
            final=True,
            errorName="step_failed",
            errorMessage="boom",
        ),
    ]
    inv = invocation("W", "i", history)
    assert inv.params is None and inv.pending_kinds == {}
    assert inv.completed["s"].to_wire() == {
        "kind": "do",
        "ok": False,
        "error": {"name": "step_failed", "message": "boom"},
    }
