"""The local cluster's shape, without starting it: one quorum, one cluster ID, internal topics
that survive a broker (replication 3, two in sync), and the Host's settings that follow it."""

from pathlib import Path

import pytest

from sumi.core.config import Settings
from sumi.host.up import _kafka
from sumi.infra import KafkaBroker, KafkaCluster


def properties(broker: KafkaBroker) -> dict[str, str]:
    return dict(line.split("=", 1) for line in broker._properties().splitlines() if line)


def test_three_nodes_form_one_quorum_whose_topics_survive_one_of_them(tmp_path: Path) -> None:
    # QC-43: an ACK is durable on two brokers before it counts, so one broker's death loses none
    cluster = KafkaCluster(tmp_path, ports=[19001, 19002, 19003])
    props = [properties(b) for b in cluster.brokers]
    assert [p["node.id"] for p in props] == ["1", "2", "3"]
    assert len({p["controller.quorum.voters"] for p in props}) == 1
    assert props[0]["controller.quorum.voters"].count("@") == 3
    assert len({b.cluster_id for b in cluster.brokers}) == 1
    for p in props:
        assert p["default.replication.factor"] == p["offsets.topic.replication.factor"] == "3"
        assert p["transaction.state.log.replication.factor"] == "3"
        assert p["min.insync.replicas"] == p["transaction.state.log.min.isr"] == "2"
    assert cluster.bootstrap == "127.0.0.1:19001,127.0.0.1:19002,127.0.0.1:19003"
    # A node formatted on a later start joins the cluster the others were formatted into.
    assert KafkaCluster(tmp_path, ports=[19001, 19002, 19003]).brokers[2].cluster_id == cluster.brokers[0].cluster_id


def test_a_single_broker_keeps_one_replica_of_everything(tmp_path: Path) -> None:  # QC-43
    p = properties(KafkaBroker(tmp_path))
    assert p["node.id"] == "1" and p["controller.quorum.voters"].count("@") == 1
    assert p["default.replication.factor"] == p["offsets.topic.replication.factor"] == "1"
    assert p["min.insync.replicas"] == p["transaction.state.log.min.isr"] == "1"


def test_only_a_single_broker_writes_its_idle_no_op_records_seldom(tmp_path: Path) -> None:
    # QC-43 (the cluster keeps Kafka's liveness records); issue 40: an idle Host is idle.
    assert properties(KafkaBroker(tmp_path))["metadata.max.idle.interval.ms"] == "5000"
    cluster = KafkaCluster(tmp_path, ports=[19001, 19002, 19003])
    assert all("metadata.max.idle.interval.ms" not in properties(b) for b in cluster.brokers)


def test_sumi_up_starts_a_cluster_when_asked_and_the_host_replicates_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # QC-43
    monkeypatch.delenv("SUMI_REPLICATION", raising=False)
    monkeypatch.setenv("SUMI_KAFKA_BROKERS", "3")
    settings = Settings.from_env()
    assert (settings.kafka_brokers, settings.replication) == (3, 3)
    assert settings.to_env()["SUMI_KAFKA_BROKERS"] == "3"  # the services see the same settings
    cluster = _kafka(tmp_path, 9092, 3)
    assert isinstance(cluster, KafkaCluster) and [b.port for b in cluster.brokers] == [9092, 9093, 9094]
    assert isinstance(_kafka(tmp_path, 9092, 1), KafkaBroker)
    monkeypatch.setenv("SUMI_REPLICATION", "2")  # said outright, it wins
    assert Settings.from_env().replication == 2
    monkeypatch.delenv("SUMI_KAFKA_BROKERS")
    monkeypatch.delenv("SUMI_REPLICATION")
    assert (Settings.from_env().kafka_brokers, Settings.from_env().replication) == (1, 1)


def test_the_brokers_jvm_is_the_laptop_default_unless_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # QC-43: a larger machine gives its broker another collector and the full JIT by one setting
    monkeypatch.delenv("SUMI_KAFKA_JVM", raising=False)
    libs = tmp_path / "libs"
    default = _kafka(tmp_path, 9092, 1, jvm=Settings.from_env().kafka_jvm.split())
    assert isinstance(default, KafkaBroker)
    assert default.java(libs)[1:5] == ["-Xms256m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]
    monkeypatch.setenv("SUMI_KAFKA_JVM", "-Xmx4g -XX:+UseG1GC")
    settings = Settings.from_env()
    assert settings.to_env()["SUMI_KAFKA_JVM"] == "-Xmx4g -XX:+UseG1GC"  # the services see the same settings
    cluster = _kafka(tmp_path, 9092, 3, jvm=settings.kafka_jvm.split())
    assert isinstance(cluster, KafkaCluster)
    for broker in cluster.brokers:
        java = broker.java(libs)
        assert java[1:3] == ["-Xmx4g", "-XX:+UseG1GC"] and "-XX:TieredStopAtLevel=1" not in java


def test_a_broker_setting_given_wins_and_leaves_the_durability_settings_alone(tmp_path: Path) -> None:
    # QC-43: the embedded broker runs two request handlers and one network thread (its idle
    # cost, issue 40); a setting given replaces only what it names, never an ACK's durability.
    default = properties(KafkaBroker(tmp_path / "a"))
    assert (default["num.io.threads"], default["num.network.threads"]) == ("2", "1")
    given = properties(KafkaBroker(tmp_path / "b", properties={"num.io.threads": "8"}))
    assert (given["num.io.threads"], given["num.network.threads"]) == ("8", "1")
    assert {k: v for k, v in given.items() if "replication" in k or "isr" in k} == {
        k: v for k, v in default.items() if "replication" in k or "isr" in k
    }
