"""A Workflow's instance counts as replicas report them (`sumi.workflow._observe`): each its own
partitions', when they differ from what the control plane holds, and the control plane's
observed is the exact sum (WF-9). Through fake replicas over one control state (`replicas_kit`)."""

from typing import Any

from sumi.control.rules.forms.durable_workflow import STATUSES
from sumi.core import records as r
from sumi.core.commands import ResourceObserve
from sumi.workflow._observe import RESEND_MS, CountReports
from tests.decisions_kit import delete, observed
from tests.unit.workflow.replicas_kit import PARTITIONS, Replica, seed, workflow

ZERO = dict.fromkeys(STATUSES, 0)
MIX = ["queued", "running", "running", "waiting", "complete", "complete", "complete", "errored", "terminated"]


def _total(keys: dict[str, str]) -> dict[str, int]:
    total = dict(ZERO)
    for status in keys.values():
        total[status] += 1
    return total


def _observes(replica: Replica) -> list[ResourceObserve]:
    return [x for x in replica.commands if isinstance(x, ResourceObserve)]


def _step(*replicas: Replica) -> None:
    for replica in replicas:
        CountReports(replica).step()


async def test_two_replicas_report_their_partitions_and_the_control_plane_sums() -> None:  # WF-9
    s, uid = workflow()
    a, b = Replica(s, (0, 1)), Replica(s, (2, 3))
    keys = seed([a, b], uid, MIX)
    reports_a, reports_b = CountReports(a), CountReports(b)
    reports_a.step()
    reports_b.step()
    assert observed(s, "wf")["instanceCounts"] == _total(keys)
    assert {x.partition for x in _observes(a)} <= {0, 1} and {x.partition for x in _observes(b)} <= {2, 3}
    sent = len(a.commands) + len(b.commands)
    reports_a.step()
    reports_b.step()
    assert len(a.commands) + len(b.commands) == sent  # nothing changed: nothing sent


async def test_a_partition_whose_instances_are_purged_reports_zeros() -> None:  # WF-9, WF-47
    s, uid = workflow()
    a, b = Replica(s, (0, 1)), Replica(s, (2, 3))
    keys = seed([a, b], uid, MIX)
    _step(a, b)
    for key, inst in list(b.table.instances.items()):  # retention purges every instance of b's
        b.table.fold(key, r.InstancePurged(uid, inst.instance_id, 1))
        del keys[key]
    _step(a, b)
    assert observed(s, "wf")["instanceCounts"] == _total(keys)
    assert set(s.space("demo").instance_counts[uid]) <= {0, 1}  # b's partitions hold nothing any more


async def test_a_new_owner_reports_a_partition_only_when_its_counts_differ() -> None:  # WF-9
    s, uid = workflow()
    a = Replica(s, range(PARTITIONS))
    keys = seed([a], uid, MIX)
    _step(a)
    same = Replica(s, (2, 3))  # b takes partitions 2 and 3 over, rebuilt from the same log
    for key, inst in a.table.instances.items():
        if a.table.partition_of(key) in same.owned:
            same.table.adopt(key, inst)
    assert same.table.instances
    _step(same)
    assert same.commands == []  # what the control plane holds is right
    fewer = Replica(s, (2, 3))  # one whose partitions hold none of them any more (purged meanwhile)
    _step(fewer)
    remaining = {k: st for k, st in keys.items() if a.table.partition_of(k) not in (2, 3)}
    assert observed(s, "wf")["instanceCounts"] == _total(remaining)


async def test_a_report_not_yet_held_is_sent_again_only_after_a_while() -> None:  # WF-9
    s, uid = workflow()
    a = Replica(s, range(PARTITIONS))
    seed([a], uid, ["running"] * 8)
    a.owned = frozenset({0})  # instances of partition 0 among them
    lagging: list[Any] = []
    a.emit = lambda key, records: lagging.extend(records)  # type: ignore[method-assign, assignment, func-returns-value]
    reports = CountReports(a)
    reports.step()
    sent = len(a.commands)
    assert sent == 1
    a.clock += RESEND_MS - 1
    reports.step()
    assert len(a.commands) == sent  # the control plane lags: not sent again yet
    a.clock += 1
    reports.step()
    assert len(a.commands) == sent + 1  # lost, or overtaken by a stale report: sent again


async def test_a_deleting_workflow_reports_no_counts() -> None:  # WF-9, WF-13
    s, uid = workflow()
    a = Replica(s, range(PARTITIONS))
    seed([a], uid, ["running"])
    delete(s, "wf")
    _step(a)
    assert _observes(a) == []
