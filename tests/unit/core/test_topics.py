"""Every topic can take an acks=all write on as few brokers as it has replicas."""

import pytest

from sumi.core.config import Settings
from sumi.wire.topics import topic_specs


@pytest.mark.parametrize("replication, isr", [(1, "1"), (2, "2"), (3, "2")])
def test_no_topic_asks_for_more_in_sync_replicas_than_it_has(replication: int, isr: str) -> None:
    # Issue 19 item 3: a single-node broker never answers NotEnoughReplicas, whatever the
    # cluster's default; on three replicas a write survives the loss of one.
    settings = Settings(kafka_bootstrap="127.0.0.1:1", database_url="postgresql://nowhere", replication=replication)
    specs = topic_specs(settings)
    assert len(specs) == 11  # with the log and metrics topics (issue 19) and the snapshots (issue 17)
    assert [t.config.get("min.insync.replicas") for t in specs] == [isr] * len(specs)
