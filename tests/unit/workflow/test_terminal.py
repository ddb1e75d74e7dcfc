"""A terminal instance in the fold (issue 17, bounded memory): it keeps only what is read of it
until its purge, and every decision, binding answer, count and snapshot made from it is the one
made from the whole instance the fold used to keep. Pure: no broker."""

import copy
from typing import Any

import pytest

from sumi.core import records as r
from sumi.wire import codec
from sumi.workflow.commands import CreateInstance, SendEvent, TerminateInstance
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules import _state
from sumi.workflow.rules._decide import status_of
from sumi.workflow.rules._snapshot import capture, fold_of, instance_of, restore
from sumi.workflow.rules._state import Counts, Instance, evolve
from tests.unit.workflow.test_snapshot import T0, fold, random_log, ring_for
from tests.unit.workflow.wf_kit import WF, Sim

LIMITS = d.Limits()
HOW = ["complete", "errored", "terminated"]


def ended(how: str) -> tuple[Sim, Instance]:
    """An instance with params, completed and pending steps, a retry configuration, attempts and
    an unmatched event, ended `how`; and the whole instance the fold kept before settling."""
    sim = Sim()
    sim.create(params={"p": "params"})
    sim.start()
    sim.do("a", result={"r": 1})
    sim.do("b", ok=False, config={"maxAttempts": 3})  # a retry: pending, configured, attempted
    sim.event("go", {"e": 1})  # no wait takes it: unmatched
    assert sim.inst is not None and sim.inst.completed and sim.inst.pending and sim.inst.events
    before = copy.deepcopy(sim.inst)
    if how == "terminated":
        sim.terminate()
    elif how == "errored":
        sim.end("errored", reason="run_threw", message="it threw")
    else:
        sim.end("complete", output={"o": "output"})
    last = sim.log[-1] if how != "terminated" else sim.log[-2]
    assert isinstance(last, r.InstanceStatusChanged) and last.status == how
    return sim, _unsettled(before, last)


def _unsettled(before: Instance, rec: r.InstanceStatusChanged) -> Instance:
    """The terminal transition as the fold made it before terminal instances were settled."""
    old = copy.deepcopy(before)
    old.status, old.output, old.terminal_at = rec.status, rec.output, rec.at
    old.error = (rec.errorReason, rec.errorMessage) if rec.errorReason is not None else None
    old.timer, old.owner, old.events, old.events_bytes = None, None, [], 0
    return old


@pytest.mark.parametrize("how", HOW)
def test_a_terminal_instance_keeps_only_what_is_read_of_it(how: str) -> None:
    # WF-21, WF-25, WF-47: status, output, error and the retention clock stay; the run's state goes
    sim, old = ended(how)
    inst = sim.inst
    assert inst is not None and inst.terminal
    kept = ("workflow_uid", "instance_id", "space", "created_at", "status", "output", "error", "terminal_at")
    assert {f: getattr(inst, f) for f in kept} == {f: getattr(old, f) for f in kept}
    assert inst.params is None and old.params is not None
    assert (inst.completed, inst.pending, inst.configs, inst.attempts, inst.events) == ({}, {}, {}, {}, [])
    assert (inst.owner, inst.timer, inst.events_bytes) == (None, None, 0)
    other, _ = ended(how)
    assert other.inst is not None and other.inst.completed is inst.completed  # one shared empty, not one each
    assert sim.rebuilt() == inst  # the fold of the log, record by record, is the same


@pytest.mark.parametrize("how", HOW)
def test_every_decision_on_a_terminal_instance_answers_as_before(how: str) -> None:
    # WF-19, WF-20, WF-21, WF-23, WF-26, WF-47: duplicate create, sendEvent, terminate, wakes,
    # late step calls and outcomes, the retention purge, a binding's status() and get()
    sim, old = ended(how)
    inst = sim.inst
    assert inst is not None
    later = T0 + 60_000
    caller = d.Caller("cmd_same", "demo", "alice", "instance.x")

    def both(decide: Any) -> None:
        assert decide(inst) == decide(old)

    both(lambda i: d.create(i, CreateInstance("wf_1", "i1", {"p": 2}), WF, caller, later))
    both(lambda i: d.event(i, SendEvent("wf_1", "i1", "go", {"e": 2}), caller, later, LIMITS, False))
    both(lambda i: d.terminate(i, TerminateInstance("wf_1", "i1"), caller, later, False))
    both(lambda i: d.terminate(i, TerminateInstance("wf_1", "i1"), caller, later, True))
    both(lambda i: d.call(i, sim.token, "step.do", {"name": "a", "ok": True}, later, LIMITS))
    both(lambda i: d.outcome(i, "complete", later, {"o": 2}))
    both(lambda i: d.outcome(i, "errored", later, reason="step_failed", message="Error: boom"))
    both(lambda i: d.needs_context(i, later))
    both(lambda i: d.next_due(i, LIMITS))
    for at in (later, old.terminal_at + LIMITS.retention_ms - 1, old.terminal_at + LIMITS.retention_ms):
        both(lambda i, at=at: d.due(i, at, LIMITS, False))
    both(status_of)
    both(lambda i: (i.instance_id, i.purged, i.space, i.owner))  # binding get, metrics, a run's owner check
    counts, was = Counts(), Counts()
    counts.add(inst)
    was.add(old)
    assert counts.per == was.per


def test_a_record_after_a_terminal_status_never_writes_the_shared_empties() -> None:
    # WF-21: no decision makes one, but the fold takes any log: the record is folded into the
    # instance's own containers and the instance is settled again
    sim, _ = ended("complete")
    inst = sim.inst
    assert inst is not None
    late = r.StepAttemptCommitted("wf_1", "i1", "z", "do", 1, True, True, T0, '{"z":1}', config='{"maxAttempts":1}')
    evolve(inst, late)
    evolve(inst, r.EventAccepted("wf_1", "i1", 9, "go", 12, T0, '{"e":9}'))
    evolve(inst, r.SleepScheduled("wf_1", "i1", "nap", T0 + 5000, "tok", T0))
    assert (inst.completed, inst.pending, inst.configs, inst.attempts, inst.events) == ({}, {}, {}, {}, [])
    assert (_state._NO_STEPS, _state._NO_NAMES, _state._NO_CONFIGS, _state._NO_ATTEMPTS, _state._NO_EVENTS) == (
        {},
        {},
        {},
        {},
        [],
    )
    evolve(inst, r.InstanceStatusChanged("wf_1", "i1", "running", T0))  # back out of terminal: its own again
    evolve(inst, late)
    assert list(inst.completed) == ["z"] and inst.completed is not _state._NO_STEPS and not _state._NO_STEPS


@pytest.mark.parametrize("seed", range(10))
def test_a_snapshot_and_the_tail_still_equal_the_whole_fold_and_terminal_instances_stay_settled(seed: int) -> None:
    # WF-21, WF-25, WF-47: restored or folded, a terminal instance is held in the one settled form
    log = random_log(seed, n=12, steps=400)
    keys = sorted({key for key, _ in log})
    for i, key in enumerate(keys[::2]):  # half of them end last, as most instances do
        wf, iid = key.split("/")
        log.append((key, r.InstanceStatusChanged(wf, iid, HOW[i % 3], T0 + 900, '{"o":2}' if i % 3 == 0 else None)))
    ring = ring_for(keys)
    whole = fold(log)
    assert any(inst.terminal for inst in whole.values())
    for cut in (len(log) // 3, len(log) // 2, len(log) - 3):
        chunks, _ = capture(fold(log[:cut]), lambda key: True, ring, [], "snap_t", limit=900)
        restored, _ = restore([codec.decode(codec.encode(c)) for c in chunks], ring)  # type: ignore[misc]
        table = fold(log[cut:], restored)
        assert table == whole
        for inst in table.values():
            if inst.terminal:
                assert inst.params is None and inst.completed is _state._NO_STEPS and inst.events is _state._NO_EVENTS


def test_a_snapshot_written_before_settling_restores_settled() -> None:
    # WF-21, WF-47: an older engine's snapshot held terminal instances whole
    sim, old = ended("complete")
    ring = ring_for(["wf_1/i1"])
    restored = instance_of(codec_round(fold_of("wf_1/i1", old, ring)), ring)
    assert restored == sim.inst and restored.completed is _state._NO_STEPS


def codec_round(f: dict[str, Any]) -> dict[str, Any]:
    chunk = codec.decode(codec.encode(r.WorkflowSnapshotChunk("s", 0, [f], [])))
    assert isinstance(chunk, r.WorkflowSnapshotChunk)
    return dict(chunk.instances[0])


def test_a_terminal_instances_output_stays_sealed_in_a_snapshot_and_shreds_with_its_key() -> None:
    # WF-13, WF-47: crypto-shredding holds for what a terminal instance keeps
    sim, _ = ended("complete")
    assert sim.inst is not None
    ring = ring_for(["wf_1/i1"])
    chunks, _ = capture({"wf_1/i1": sim.inst}, lambda key: True, ring, [], "snap_o")
    raw = b"".join(codec.encode(c) for c in chunks)
    assert b"output" not in raw and b"params" not in raw and b"sealed1:" in raw
    assert restore(chunks, ring)[0]["wf_1/i1"] == sim.inst
    for key_id in ring.keys_of("wf_1", "i1"):
        ring.drop(key_id)
    assert restore(chunks, ring)[0]["wf_1/i1"].output is None


def test_names_many_instances_share_are_held_once() -> None:
    # WF-21: a status, a Workflow's UID and a Space decoded per record are one object in the fold
    a = evolve(None, codec_rec(r.InstanceCreated("wf_1", "a", "demo", T0)))
    b = evolve(None, codec_rec(r.InstanceCreated("wf_1", "b", "demo", T0)))
    assert a is not None and b is not None
    for inst in (a, b):
        evolve(inst, codec_rec(r.InstanceStatusChanged("wf_1", inst.instance_id, "complete", T0, '{"o":1}')))
    assert a.workflow_uid is b.workflow_uid and a.space is b.space and a.status is b.status


def codec_rec(rec: r.WorkflowRecord) -> Any:
    return codec.decode(codec.encode(rec))


def test_a_completed_step_keeps_no_retry_configuration_or_attempts() -> None:
    # WF-37, WF-40, WF-41: read only while the step is unfinished; a completed name is replayed
    sim = Sim()
    sim.create()
    sim.start()
    sim.do("once", result={"r": 1}, config={"maxAttempts": 2})
    sim.do("flaky", ok=False, config={"maxAttempts": 3, "initialDelaySeconds": 0})
    inst = sim.inst
    assert inst is not None
    assert list(inst.configs) == list(inst.attempts) == ["flaky"] and inst.attempts["flaky"] == 1
    sim.tick(sim.now)
    sim.start()
    again = sim.do("flaky", ok=True, result={"r": 2}, config={"maxAttempts": 9})  # the saved one stands
    assert isinstance(again.records[0], r.StepAttemptCommitted) and again.records[0].attempt == 2
    assert inst.configs == {} and inst.attempts == {} and set(inst.completed) == {"once", "flaky"}
    assert sim.call("step.do", name="once", ok=True, result={"r": 3}).reply == {"action": "resolve", "result": {"r": 1}}
    assert sim.rebuilt() == inst
