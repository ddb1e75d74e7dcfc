"""Which data keys a workflow record makes and destroys (WF-13, WF-25, WF-47), on the pure core."""

import itertools

from sumi.core import records as r
from sumi.core import sealing
from sumi.workflow.rules import _keys
from sumi.workflow.rules._state import Event, Instance

_ids = itertools.count()


def new_id() -> str:
    return f"dk_{next(_ids)}"


def apply(ring: sealing.KeyRing, inst: Instance | None, rec: r.WorkflowRecord) -> _keys.Changes:
    change = _keys.changes(inst, rec, ring, 1, new_id)
    for made in change.made:
        ring.add(made)
    for dropped in change.dropped:
        ring.drop(dropped)
    return change


def test_an_instance_key_with_the_create_and_a_key_per_event() -> None:  # WF-13, WF-25
    ring = sealing.KeyRing()
    made = apply(ring, None, r.InstanceCreated("wf", "i", "demo", 1, None)).made
    assert [k.sequence for k in made] == [None]
    assert apply(ring, None, r.EventAccepted("wf", "i", 1, "go", 5, 2, '"x"')).made[0].sequence == 1
    assert apply(ring, None, r.EventAccepted("wf", "i", 2, "go", 5, 2, None)).made == []  # nothing to seal
    step = r.StepAttemptCommitted("wf", "i", "s", "do", 1, True, True, 3, '"r"')
    assert apply(ring, None, step).made == []  # the instance key seals it


def test_a_terminal_transition_destroys_only_the_unmatched_events_keys() -> None:  # WF-25
    ring = sealing.KeyRing()
    apply(ring, None, r.InstanceCreated("wf", "i", "demo", 1, None))
    for seq in (1, 2):
        apply(ring, None, r.EventAccepted("wf", "i", seq, "t", 5, 2, '"x"'))
    inst = Instance("wf", "i", status="running", events=[Event(2, "t", '"x"', 5)])  # event 1 was matched
    change = apply(ring, inst, r.InstanceStatusChanged("wf", "i", "complete", 3, None))
    assert len(change.dropped) == 1
    assert ring.key_for("wf", "i", 2) is None and ring.key_for("wf", "i", 1) is not None
    assert ring.key_for("wf", "i") is not None  # the history is retained until the purge


def test_a_purge_destroys_every_key_of_the_instance_or_the_workflow() -> None:  # WF-13, WF-47
    ring = sealing.KeyRing()
    for iid in ("a", "b"):
        apply(ring, None, r.InstanceCreated("wf", iid, "demo", 1, '"p"'))
        apply(ring, None, r.EventAccepted("wf", iid, 1, "t", 5, 2, '"x"'))
    apply(ring, None, r.InstanceCreated("other", "a", "demo", 1, '"p"'))
    assert len(apply(ring, None, r.InstancePurged("wf", "a", 5)).dropped) == 2
    assert ring.keys_of("wf", "a") == [] and len(ring.keys_of("wf", "b")) == 2
    apply(ring, None, r.InstancesPurged("wf", 6))
    assert ring.keys_of_workflow("wf") == [] and ring.keys_of("other", "a") != []
    # A re-created ID after its purge gets a key of its own, never the destroyed one.
    assert apply(ring, None, r.InstanceCreated("wf", "a", "demo", 7, None)).made


def test_a_partitions_marker_destroys_only_the_keys_of_its_partition() -> None:  # WF-13
    # each replica purges its own partitions: another partition's keys are its owner's
    ring = sealing.KeyRing()
    for iid in ("a", "b", "c"):
        apply(ring, None, r.InstanceCreated("wf", iid, "demo", 1, '"p"'))
    here = {"a", "c"}
    change = _keys.changes(None, r.InstancesPurged("wf", 6, "op_1"), ring, 7, new_id, lambda iid: iid in here)
    assert change.dropped == sorted(ring.keys_of("wf", "a") + ring.keys_of("wf", "c"))
