"""When an engine snapshots a partition: in proportion to the state while busy, soon once quiet."""

from sumi.core.config import Settings
from sumi.engines.snapshots import snapshot_due

SETTINGS = Settings.from_env(snapshot_records=50_000, snapshot_quiet_seconds=2.0)


def test_a_busy_partition_waits_for_half_its_state_of_log() -> None:
    # QC-43: a start folds at most about that much log after the snapshot it restores
    assert not snapshot_due(49_999, 0, 0.0, SETTINGS)
    assert snapshot_due(50_000, 0, 0.0, SETTINGS)
    assert not snapshot_due(499_999, 1_000_000, 0.0, SETTINGS)
    assert snapshot_due(500_000, 1_000_000, 0.0, SETTINGS)


def test_a_quiet_partition_is_snapshotted_once_it_grew_by_a_64th_of_its_state() -> None:
    # QC-43: an engine restarted after its load ended folds next to nothing
    assert not snapshot_due(20_000, 1_000_000, 1.9, SETTINGS)
    assert snapshot_due(20_000, 1_000_000, 2.0, SETTINGS)
    # a trickle into a big state does not rewrite it every quiet moment
    assert not snapshot_due(15_624, 1_000_000, 60.0, SETTINGS)
    assert snapshot_due(1, 10, 2.0, SETTINGS)


def test_a_partition_that_folded_nothing_needs_no_snapshot() -> None:
    # QC-43
    assert not snapshot_due(0, 0, 3600.0, SETTINGS)
    assert not snapshot_due(0, 1_000_000, 3600.0, SETTINGS)
