"""The workflow engine's instance table (`sumi.workflow.rules._table`): the fold, the keys of each
Workflow, the counts and the durable due times, derived from the records alone. Pure."""

import pytest

from sumi.core import records as r
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._table import InstanceTable
from tests.unit.workflow.test_snapshot import T0, random_log

LIMITS = d.Limits(retention_ms=3_600_000)


def table_of(log: list[tuple[str, r.Record]]) -> InstanceTable:
    table = InstanceTable(LIMITS)
    for key, rec in log:
        if isinstance(rec, r.WorkflowRecord) and not isinstance(rec, r.InstancesPurged):
            table.fold(key, rec)
    return table


@pytest.mark.parametrize("seed", range(6))
def test_every_due_time_of_the_fold_fires_once_and_a_purge_leaves_nothing(seed: int) -> None:
    # WF-9, WF-13, WF-16, WF-21: a rebuilt table re-arms each instance's due time from the log
    table = table_of(random_log(seed))
    expected = {k: due for k, inst in table.instances.items() if (due := d.next_due(inst, LIMITS)) is not None}
    later = max(expected.values(), default=T0) + 1
    fired = {key for key, _ in table.due_now(later)}
    assert fired == set(expected)
    assert list(table.due_now(later)) == []  # popped: what is left lies later (stale entries)
    per = {wf: sum(n.values()) for wf, n in table.counts.per.items()}
    assert per == {wf: len(keys) for wf, keys in table.keys_of.items()}
    assert sorted(k for wf in table.keys_of for k in table.keys(wf)) == sorted(table.instances)


def test_a_due_time_not_yet_come_waits_and_a_moved_one_is_stale() -> None:
    # WF-16: a sleep fires at its time, not before; a timer the instance moved past never fires
    table = InstanceTable(LIMITS)
    table.fold("wf/a", r.InstanceCreated("wf", "a", "demo", T0, None))
    table.fold("wf/a", r.InstanceStatusChanged("wf", "a", "running", T0))
    table.fold("wf/a", r.SleepScheduled("wf", "a", "nap", T0 + 5000, "tok", T0))
    assert table.next_due() == T0 + 5000 and list(table.due_now(T0 + 4999)) == []
    table.fold("wf/a", r.InstanceStatusChanged("wf", "a", "complete", T0 + 1, '{"o":1}'))
    assert [k for k, _ in table.due_now(T0 + 5000)] == []  # the sleep is gone with the run
    purged = table.fold("wf/a", r.InstancePurged("wf", "a", T0 + 2))
    assert purged is not None and table.instances == {} and table.keys_of == {}
