"""The workflow engine's pure core: every decision folded, named by the requirement it holds."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sumi.core import records as r
from sumi.workflow.rules import _decide as d
from tests.unit.workflow.wf_kit import T0, Sim

DO1 = {"maxAttempts": 1}


def running(**limits: object) -> Sim:
    sim = Sim(d.Limits(**limits))  # type: ignore[arg-type]
    sim.create()
    sim.start()
    return sim


# ---- create, status ---------------------------------------------------------------------------


def test_create_answers_201_and_a_retained_id_is_never_a_second_run() -> None:  # WF-10, WF-19
    sim = Sim()
    first = sim.create(params={"n": 1})
    assert (first.accepted, first.status, json.loads(first.result or "")) == (
        True,
        201,
        {"id": "i1", "status": "queued"},
    )
    again = sim.create(params={"n": 2})
    assert (again.accepted, json.loads(again.problem or "")["code"]) == (False, "instance_exists")
    assert sim.inst is not None and sim.inst.params == '{"n":1}'


@pytest.mark.parametrize(
    ("wf", "code"),
    [
        (d.WorkflowView(exists=False), "not_found"),
        (d.WorkflowView(exists=True, space="other", ready=True), "not_found"),
        (d.WorkflowView(exists=True, space="demo", ready=True, closed=True), "not_found"),  # WF-13 intake closed
        (d.WorkflowView(exists=True, space="demo", ready=False), "workflow_not_ready"),
    ],
)
def test_create_needs_a_ready_workflow(wf: d.WorkflowView, code: str) -> None:  # WF-9, WF-13
    sim = Sim()
    answer = sim.create(wf=wf)
    assert json.loads(answer.problem or "")["code"] == code and sim.inst is None


def test_a_context_start_makes_it_running_and_completion_publishes_output() -> None:  # WF-21, WF-29, WF-30
    sim = running()
    assert sim.inst is not None and sim.inst.status == "running" and sim.inst.contexts == 1
    sim.end("complete", output={"ok": True})
    assert sim.inst.status == "complete" and sim.inst.output == '{"ok":true}'
    assert sim.statuses() == ["running", "complete"]


@pytest.mark.parametrize("reason", ["run_threw", "step_failed", "step_definition_mismatch"])
def test_errored_carries_one_of_the_reasons(reason: str) -> None:  # WF-21, WF-22, WF-35, WF-45
    sim = running()
    sim.do("a", ok=False)  # the final failure step_failed needs (below)
    sim.end("errored", reason=reason, message="Error: boom")
    assert sim.inst is not None and sim.inst.error == (reason, "Error: boom") and sim.inst.output is None


@pytest.mark.parametrize(
    "failed, message",
    [(False, "Error: boom"), (True, "Error: forged"), (True, "")],
    ids=["no-failure", "another-message", "no-message"],
)
def test_step_failed_stands_only_for_a_final_failure_the_host_committed(failed: bool, message: str) -> None:
    # WF-44, WF-45: the context's word is not enough; the Host matches it against what it committed.
    sim = running()
    sim.do("ok")
    if failed:
        sim.do("a", ok=False)
    sim.end("errored", reason="step_failed", message=message)
    assert sim.inst is not None and sim.inst.error is not None
    assert sim.inst.error[0] == "run_threw" and "step_failed" in (sim.inst.error[1] or "")


def test_a_failure_committed_in_an_earlier_context_is_still_genuine() -> None:  # WF-36, WF-45
    sim = running()
    sim.do("a", ok=False)
    sim.end("stopped")  # the outcome was lost with the context; a new one replays the failure
    sim.start()
    sim.end("errored", reason="step_failed", message="Error: boom")
    assert sim.inst is not None and sim.inst.error == ("step_failed", "Error: boom")


# ---- fencing -----------------------------------------------------------------------------------


def test_an_old_owner_can_never_commit_again() -> None:  # WF-14, WF-46
    sim = running()
    old = sim.token
    sim.start()  # a new owner (the old engine paused, then the context was taken over)
    before = len(sim.log)
    dec = sim.do("a", token=old)
    assert dec.error is not None and dec.error[0] == "fenced" and len(sim.log) == before
    assert sim.do("a").reply == {"action": "resolve"}


def test_nothing_commits_after_a_terminal_transition() -> None:  # WF-14, WF-26
    sim = running()
    sim.end("complete")
    assert sim.do("a").error is not None


# ---- do, retries, replay ------------------------------------------------------------------------


def test_a_committed_step_replays_its_result_without_a_new_commit() -> None:  # WF-36, WF-41
    sim = running()
    assert sim.do("a", result={"v": 1}).reply == {"action": "resolve", "result": {"v": 1}}
    n = len(sim.log)
    assert sim.do("a", result={"v": 2}).reply == {"action": "resolve", "result": {"v": 1}}
    assert len(sim.log) == n
    assert sim.inst is not None and sim.inst.completed["a"].result == '{"v":1}'


def test_a_failure_with_attempts_left_retries_in_a_fresh_context_even_at_delay_0() -> None:  # WF-40, WF-41
    sim = running()
    dec = sim.do("a", ok=False, config={"maxAttempts": 2})
    assert dec.reply == {"action": "suspend"} and dec.stop
    assert sim.inst is not None and sim.inst.timer is not None and sim.inst.timer.due == T0
    assert sim.end("suspended").runnable and d.needs_context(sim.inst, sim.now)
    sim.start()
    assert sim.inst.contexts == 2 and sim.inst.timer is None
    assert sim.do("a", result={"x": 1}).reply == {"action": "resolve", "result": {"x": 1}}
    attempts = [(x.attempt, x.ok, x.final) for x in sim.log if isinstance(x, r.StepAttemptCommitted)]
    assert attempts == [(1, False, False), (2, True, True)]


def test_the_final_failure_records_step_failed() -> None:  # WF-41, WF-45
    sim = running()
    dec = sim.do("a", ok=False)
    assert dec.reply is not None and dec.reply["action"] == "reject"
    assert sim.inst is not None and sim.inst.completed["a"].error_name == "step_failed"
    assert sim.do("a", ok=True).reply == dec.reply  # replayed failure, no new effect (WF-36)


def test_the_first_saved_configuration_wins() -> None:  # WF-37
    sim = running()
    sim.do("a", ok=False, config={"maxAttempts": 3, "initialDelaySeconds": 5})
    sim.end("suspended")
    sim.tick(T0 + 5000)
    sim.start()
    sim.do("a", ok=False, config={"maxAttempts": 1})  # a newer Version's config is ignored
    assert sim.inst is not None and sim.inst.timer is not None and sim.inst.timer.attempt == 3


@given(
    initial=st.integers(0, 43200),
    cap=st.integers(0, 43200),
    k=st.integers(1, 99),
    backoff=st.sampled_from(["constant", "exponential"]),
)
def test_retry_delays(initial: int, cap: int, k: int, backoff: str) -> None:  # WF-40
    cfg = {"initialDelaySeconds": initial, "maxDelaySeconds": cap, "backoff": backoff}
    want = min(cap, initial) if backoff == "constant" else min(cap, initial * 2 ** (k - 1))
    assert d.retry_delay_ms(cfg, k) == want * 1000


def test_retry_delay_defaults() -> None:  # WF-40
    assert d.retry_delay_ms({}, 3) == 0
    assert d.retry_delay_ms({"initialDelaySeconds": 60000, "backoff": "exponential"}, 1) == 43200 * 1000


def test_reusing_an_unfinished_name_with_another_kind_is_a_mismatch() -> None:  # WF-35
    sim = running()
    sim.call("step.sleep", name="a", seconds=60)
    sim.end("suspended")
    sim.tick(T0)  # not due
    sim.start()
    dec = sim.do("a")
    assert dec.error is not None and dec.error[0] == "step_definition_mismatch"


# ---- sleep ----------------------------------------------------------------------------------------


def test_a_sleep_deadline_is_fixed_at_the_first_call() -> None:  # WF-42, WF-46
    sim = running()
    dec = sim.call("step.sleep", name="nap", seconds=10)
    assert dec.reply == {"action": "suspend"} and dec.stop
    assert sim.inst is not None and sim.inst.status == "running"  # not sleeping before the stop (WF-46)
    sim.end("suspended")
    assert sim.inst.status == "sleeping" and d.next_due(sim.inst, sim.limits) == T0 + 10_000
    sim.now = T0 + 5000
    sim.start()  # e.g. after an engine restart: the second call does not move the deadline
    assert sim.call("step.sleep", name="nap", seconds=10).reply == {"action": "suspend"}
    sim.end("suspended")
    assert sim.tick(T0 + 9999).records == []
    assert sim.tick(T0 + 10_000).runnable
    assert sim.inst.completed["nap"].ok and sim.statuses()[-2:] == ["sleeping", "running"]


def test_sleep_0_completes_in_the_same_context() -> None:  # WF-42
    sim = running()
    assert sim.call("step.sleep", name="nap", seconds=0).reply == {"action": "resolve"}
    assert sim.alive


# ---- waitForEvent, events --------------------------------------------------------------------------


def test_a_wait_consumes_the_oldest_matching_event_atomically() -> None:  # WF-43
    sim = running()
    sim.event("other", {"n": 0})
    sim.event("go", {"n": 1})
    sim.event("go", {"n": 2})
    dec = sim.call("step.waitForEvent", name="w1", type="go", timeoutSeconds=60)
    assert dec.reply == {"action": "resolve", "payload": {"n": 1}}
    (commit,) = dec.records
    assert isinstance(commit, r.StepAttemptCommitted) and commit.eventSequence == 2
    dec = sim.call("step.waitForEvent", name="w2", type="go", timeoutSeconds=60)
    assert dec.reply == {"action": "resolve", "payload": {"n": 2}}
    assert sim.inst is not None and [e.type for e in sim.inst.events] == ["other"]  # one event, one wait


def test_a_wait_without_a_match_publishes_waiting_after_the_stop_and_an_event_wakes_it() -> None:  # WF-43, WF-46
    sim = running()
    assert sim.call("step.waitForEvent", name="w", type="go", timeoutSeconds=60).stop
    sim.end("suspended")
    assert sim.inst is not None and sim.inst.status == "waiting"
    answer = sim.event("go")
    assert answer.accepted and json.loads(answer.result or "") == {"sequence": 1}
    assert sim.inst.status == "running" and sim.inst.completed["w"].result is None
    sim.start()
    assert sim.call("step.waitForEvent", name="w", type="go", timeoutSeconds=60).reply == {"action": "resolve"}


def test_an_event_at_the_timeout_instant_wins() -> None:  # WF-43
    sim = running()
    sim.call("step.waitForEvent", name="w", type="go", timeoutSeconds=5)
    sim.end("suspended")
    assert sim.tick(T0 + 5000).records == []
    sim.event("go", {"won": True})
    assert sim.inst is not None and sim.inst.completed["w"].ok


def test_after_the_deadline_the_wait_times_out_and_a_later_event_stays_queued() -> None:  # WF-43
    sim = running()
    sim.call("step.waitForEvent", name="w", type="go", timeoutSeconds=5)
    sim.end("suspended")
    sim.now = T0 + 5001
    sim.event("go")  # the overdue timeout is decided first
    assert sim.inst is not None and sim.inst.completed["w"].error_name == "wait_timeout"
    assert [e.type for e in sim.inst.events] == ["go"]


def test_event_queue_limits_and_the_direct_delivery_exception() -> None:  # WF-24
    sim = running(max_events=2)
    assert sim.event("a").accepted and sim.event("a").accepted
    full = sim.event("a")
    assert json.loads(full.problem or "")["code"] == "event_queue_full"
    sim.call("step.waitForEvent", name="w", type="b", timeoutSeconds=60)
    sim.end("suspended")
    assert sim.event("b").accepted  # handed straight to the waiting wait


def test_event_bytes_limit() -> None:  # WF-24
    sim = running(max_event_bytes=41)
    assert sim.event("a", {"s": "x" * 10}).accepted  # {"payload":{"s":"xxxxxxxxxx"},"type":"a"} = 41 bytes
    assert not sim.event("a").accepted


def test_events_to_unknown_or_terminal_instances() -> None:  # WF-23
    sim = Sim()
    assert json.loads(sim.event("a").problem or "")["code"] == "unknown_instance"
    sim.create()
    sim.start()
    sim.end("complete")
    assert json.loads(sim.event("a").problem or "")["code"] == "instance_terminal"


def test_a_terminal_transition_purges_unmatched_events() -> None:  # WF-25
    sim = running()
    sim.event("a")
    sim.end("errored", reason="run_threw")
    assert sim.inst is not None and sim.inst.events == [] and sim.inst.events_bytes == 0


# ---- terminate -----------------------------------------------------------------------------------


def test_terminate_stops_the_context_first() -> None:  # WF-26, WF-46
    sim = running()
    first = sim.terminate()
    assert first.stop and first.records == []  # no answer before the physical stop
    sim.alive = False
    second = sim.terminate()
    assert [x.status for x in second.records if isinstance(x, r.InstanceStatusChanged)] == ["terminated"]
    assert sim.do("late").error is not None  # fenced
    again = sim.terminate()  # already terminal: success
    assert [json.loads(x.result or "") for x in again.records] == [{"id": "i1", "status": "terminated"}]


# ---- limits --------------------------------------------------------------------------------------


def test_the_step_limit_is_enforced_by_the_host() -> None:  # WF-38
    sim = running(max_steps=3)
    for name in "abc":
        sim.do(name)
    assert sim.do("a").reply is not None  # a completed name is a replay, not a new step
    dec = sim.do("d")
    assert dec.error is not None and dec.error[0] == "step_limit_exceeded" and dec.stop
    assert sim.inst is not None and sim.inst.error == ("step_limit_exceeded", "more than 3 steps")


def test_a_step_past_the_limit_is_refused_before_its_effect() -> None:  # WF-38
    # step.begin: the runtime asks before the effect of a step past its invocation's limits.
    sim = running(max_steps=2)
    sim.do("a")
    within = sim.call("step.begin", name="b")
    assert (within.reply, within.records, within.stop) == ({"action": "resolve"}, [], False)
    sim.do("b")
    dec = sim.call("step.begin", name="c")
    assert dec.error is not None and dec.error[0] == "step_limit_exceeded" and dec.stop
    assert not any(isinstance(x, r.StepAttemptCommitted) for x in dec.records + dec.after_stop)
    assert sim.inst is not None and sim.inst.error == ("step_limit_exceeded", "more than 2 steps")


def test_no_attempt_starts_past_the_lifetime() -> None:  # WF-38, WF-41
    sim = running(lifetime_ms=60_000)
    sim.do("a", ok=False, config={"maxAttempts": 3})  # a retry pending: "a" is begun
    sim.now = T0 + 1000
    sim.start()
    assert sim.call("step.begin", name="a").reply == {"action": "resolve"}
    sim.now = T0 + 60_000
    dec = sim.call("step.begin", name="a")
    assert dec.error is not None and dec.error[0] == "lifetime_exceeded" and dec.stop
    assert sim.inst is not None and sim.inst.status == "errored" and sim.inst.error is not None
    assert sim.inst.error[0] == "lifetime_exceeded"


def test_the_lifetime_is_enforced_and_a_sleep_is_not_shortened() -> None:  # WF-38, WF-42
    sim = running(lifetime_ms=60_000)
    sim.call("step.sleep", name="long", seconds=3600)
    sim.end("suspended")
    assert sim.inst is not None and d.next_due(sim.inst, sim.limits) == T0 + 60_000
    sim.tick(T0 + 60_000)
    assert sim.inst.error is not None and sim.inst.error[0] == "lifetime_exceeded"
    assert "long" not in sim.inst.completed


# ---- retention -----------------------------------------------------------------------------------


def test_retention_purges_after_the_period_and_the_id_may_be_reused() -> None:  # WF-47, WF-20
    sim = running(retention_ms=1000)
    sim.end("complete")
    assert sim.inst is not None and d.next_due(sim.inst, sim.limits) == T0 + 1000
    assert sim.tick(T0 + 999).records == []
    (purge,) = sim.tick(T0 + 1000).records
    assert isinstance(purge, r.InstancePurged) and sim.inst.purged
    assert json.loads(sim.event("a").problem or "")["code"] == "unknown_instance"
    assert sim.create().accepted


def test_the_default_retention_is_30_days() -> None:  # WF-47
    assert d.Limits().retention_ms == 2_592_000 * 1000


# ---- always-replay -------------------------------------------------------------------------------


def test_always_replay_ends_the_context_after_every_committed_step() -> None:  # WF-32, WF-36
    sim = running(always_replay=True)
    dec = sim.do("a", result={"v": 1})
    assert dec.reply == {"action": "suspend"} and dec.stop and dec.runnable
    assert sim.end("suspended").runnable
    sim.start()
    assert sim.do("a").reply == {"action": "resolve", "result": {"v": 1}}


# ---- the fold ------------------------------------------------------------------------------------

ACTIONS = st.lists(
    st.sampled_from(["do_ok", "do_fail", "sleep", "wait", "event", "tick", "restart", "end", "terminate"]),
    max_size=30,
)


@given(actions=ACTIONS, names=st.lists(st.sampled_from("abcd"), min_size=30, max_size=30))
def test_the_fold_of_the_log_is_the_state_the_engine_kept(actions: list[str], names: list[str]) -> None:
    # WF-36, WF-41, WF-42, WF-43: timers, events, attempts and owners are all derived from records alone.
    sim = Sim(d.Limits(retention_ms=10_000))
    sim.create()
    sim.start()
    for action, name in zip(actions, names, strict=False):
        assert sim.inst is not None
        sim.now += 1000
        if action == "tick":
            due = d.next_due(sim.inst, sim.limits)
            if due is not None:
                sim.tick(max(due, sim.now))
        elif action == "event":
            sim.event(name)
        elif action == "terminate":
            sim.alive = False
            sim.terminate()
        elif sim.inst.purged:
            continue
        elif action == "restart" and d.needs_context(sim.inst, sim.now) and not sim.inst.terminal:
            sim.start()
        elif action == "end" and sim.alive:
            sim.end("complete")
        elif sim.alive and action in ("do_ok", "do_fail"):
            sim.do(name, ok=action == "do_ok", config={"maxAttempts": 2})
        elif sim.alive and action == "sleep":
            sim.call("step.sleep", name=name + "s", seconds=2)
        elif sim.alive and action == "wait":
            sim.call("step.waitForEvent", name=name + "w", type=name, timeoutSeconds=3)
        assert sim.rebuilt() == sim.inst
