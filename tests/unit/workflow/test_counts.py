"""The per-status instance counts the fold keeps (WF-9) equal a full recount after any sequence of records."""

from hypothesis import given
from hypothesis import strategies as st

from sumi.control.rules.forms.durable_workflow import STATUSES, summed
from sumi.core import records as r
from sumi.wire.topics import instance_key, partition_for
from sumi.workflow.rules._state import Counts, Instance, LogRecord

WORKFLOWS = ("wf_a", "wf_b")
IDS = ("i1", "i2", "i3")


def _record(kind: str, wf: str, iid: str, status: str, at: int) -> LogRecord:
    if kind == "create":
        return r.InstanceCreated(wf, iid, "demo", at)
    if kind == "status":
        return r.InstanceStatusChanged(wf, iid, status, at)
    if kind == "purge":
        return r.InstancePurged(wf, iid, at)
    if kind == "started":
        return r.InstanceContextStarted(wf, iid, "tok", "ver", 1, at)
    return r.CommandDecided("c", "demo", "alice", "instance.create", True, 201, at)


records = st.lists(
    st.builds(
        _record,
        st.sampled_from(["create", "create", "status", "status", "status", "purge", "started", "decided"]),
        st.sampled_from(WORKFLOWS),
        st.sampled_from(IDS),
        st.sampled_from(STATUSES),
        st.integers(0, 10**6),
    ),
    max_size=60,
)


def _recount(instances: dict[str, Instance], wf: str) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for inst in instances.values():
        if inst.workflow_uid == wf and not inst.purged:
            counts[inst.status] += 1
    return counts


@given(log=records, drop_purged=st.booleans())
def test_the_kept_counts_equal_a_full_recount(log: list[LogRecord], drop_purged: bool) -> None:  # WF-9, WF-21
    counts, instances = Counts(), {}
    for rec in log:
        if isinstance(rec, r.CommandDecided):
            key = "-"  # an answer on a key of its own: it counts nothing
        else:
            key = f"{rec.workflowUid}/{rec.instanceId}" if not isinstance(rec, r.InstancesPurged) else rec.workflowUid
        inst = counts.fold(instances.get(key), rec)
        if inst is not None and inst.purged and drop_purged:
            instances.pop(key, None)  # as the engine does
        elif inst is not None:
            instances[key] = inst
        for wf in WORKFLOWS:
            assert counts.of(wf) == _recount(instances, wf)
    assert set(counts.per) == {i.workflow_uid for i in instances.values() if not i.purged}  # nothing left over


def test_a_purge_and_a_re_create_move_the_counts() -> None:  # WF-9, WF-19, WF-47
    counts = Counts()
    inst = counts.fold(None, r.InstanceCreated("wf", "i", "demo", 1))
    inst = counts.fold(inst, r.InstanceStatusChanged("wf", "i", "complete", 2))
    assert counts.of("wf")["complete"] == 1 and counts.of("wf")["queued"] == 0
    inst = counts.fold(inst, r.InstancePurged("wf", "i", 3))
    assert counts.of("wf") == dict.fromkeys(STATUSES, 0) and counts.per == {}
    counts.fold(inst, r.InstanceCreated("wf", "i", "demo", 4))  # a purged ID may be used again
    assert counts.of("wf")["queued"] == 1


PARTS = 3


@given(log=records)
def test_the_counts_per_partition_equal_a_recount_and_add_up(log: list[LogRecord]) -> None:  # WF-9
    # each replica reports the partitions it owns: each partition's counts are exact, and together
    # they are the Workflow's
    counts, instances = Counts(partition_of=lambda key: partition_for(key, PARTS)), {}
    for rec in log:
        if isinstance(rec, r.CommandDecided):
            continue
        key = instance_key(rec.workflowUid, rec.instanceId)
        inst = counts.fold(instances.get(key), rec, key)
        if inst is not None:
            instances[key] = inst
    for wf in WORKFLOWS:
        for part in range(PARTS):
            here = {k: i for k, i in instances.items() if partition_for(k, PARTS) == part}
            assert counts.of(wf, part) == _recount(here, wf)
        assert summed(counts.of(wf, part) for part in range(PARTS)) == counts.of(wf)
    assert set(counts.parts) == set(counts.per)  # a Workflow counting nothing is in neither
