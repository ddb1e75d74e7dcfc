"""A KRaft Apache Kafka broker on the local JVM: a single node, or one member of a `KafkaCluster`.

The jars come from Maven Central through `mvn` and the pom.xml beside this
file, fetched once into the cache and reused (a marker file says the copy is
whole). The broker listens on 127.0.0.1 only.
"""

import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from xml.etree import ElementTree

from sumi.infra._cache import cache_dir
from sumi.infra._ports import free_port, port_taken, wait_for_port
from sumi.infra._probe import kafka_answers
from sumi.infra._watched import Watched
from sumi.infra.lifeline import STOP_GRACE, watchdog_argv

HERE = Path(__file__).parent / "kafka"

# The JVM of the embedded broker, chosen for a laptop of two cores (tests/bench/bench_broker.py,
# docs/decisions.md "The embedded broker's JVM"): C1 only and the serial collector start in
# about half the time and spend no core on compiling or on concurrent collection threads.
# No perf data: its sampler woke the JVM 20 times a second for counters only jstat reads.
BROKER_JVM = ("-Xms256m", "-Xmx768m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData")
# Two request handlers and one network thread, not eight and three: on two cores more only take
# turns, and each idle one wakes every 300 ms. A broker with no client idled at 1.5 % of a core,
# 0.9-1.05 % with these; the queue's throughput did not move, its latency fell (docs/decisions.md
# "The embedded broker's JVM"). `properties` replaces them, as any other of the broker's settings.
BROKER_THREADS = {"num.io.threads": "2", "num.network.threads": "1"}


def kafka_version() -> str:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ElementTree.parse(HERE / "pom.xml").getroot()
    return root.find("m:properties/m:kafka.version", ns).text  # type: ignore[union-attr,return-value]


def ensure_jars(cache: str = "") -> Path:
    """The broker's jars in the cache under `cache` (Settings.cache_dir), fetched the first time."""
    libs = cache_dir(cache) / f"kafka-{kafka_version()}" / "libs"
    marker = libs / ".complete"
    if marker.exists():
        return libs
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise RuntimeError("the local Kafka broker needs `java` (17+) and `mvn` on PATH")
    tmp = libs.with_name("libs.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            # -q still colours its (empty) output: escape codes on a terminal that expects none.
            "-Dstyle.color=never",
            "-f",
            str(HERE / "pom.xml"),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    marker.touch()
    return libs


class KafkaBroker(Watched):
    """Start with `start()`, stop with `stop()`; `bootstrap` is host:port.

    Alone by default (its own single-voter quorum, every internal topic on one replica).
    `KafkaCluster` makes several of these members of one quorum: it names the node, the
    voters, the cluster ID and the replication its internal topics get.
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        port: int | None = None,
        *,
        node_id: int = 1,
        replicas: int = 1,
        cache: str = "",
        jvm: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> None:
        self.properties = {**BROKER_THREADS, **(properties or {})}  # written last: they win
        self.cache = cache  # Settings.cache_dir: where the broker's jars are kept
        self.jvm = tuple(jvm) or BROKER_JVM  # Settings.kafka_jvm, split
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="sumi-kafka-"))
        self._scratch = None if data_dir is not None else self.data_dir
        self.port = port or free_port()
        self.controller_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.node_id = node_id
        self.replicas = replicas
        self.voters = f"{node_id}@127.0.0.1:{self.controller_port}"
        self.cluster_id = uuid.uuid4().hex[:22]
        self._proc: subprocess.Popen[bytes] | None = None

    def _properties(self) -> str:
        # Acks=all everywhere: an internal topic needing more in-sync replicas than it can lose
        # one of would stop every transaction at the first broker down, so two of three.
        isr = min(self.replicas, 2)
        return "\n".join(
            [
                "process.roles=broker,controller",
                f"node.id={self.node_id}",
                f"controller.quorum.voters={self.voters}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                f"log.dirs={self.data_dir / 'logs'}",
                "num.partitions=1",
                f"default.replication.factor={self.replicas}",
                f"min.insync.replicas={isr}",
                f"offsets.topic.replication.factor={self.replicas}",
                "offsets.topic.num.partitions=4",
                f"transaction.state.log.replication.factor={self.replicas}",
                f"transaction.state.log.min.isr={isr}",
                "transaction.state.log.num.partitions=4",
                f"share.coordinator.state.topic.replication.factor={self.replicas}",
                f"share.coordinator.state.topic.min.isr={isr}",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                # Why a single node logged NotEnoughReplicas (issues 19, 20): not its ISR (one replica,
                # min.insync 1, never shrunk; the broker logs no such append error) but KIP-890's produce
                # verification, which answers a pre-KIP-890 transactional client (aiokafka) with
                # NOT_ENOUGH_REPLICAS, its one retriable code, while the transaction coordinator is still
                # busy with the partition (loading, or the last transaction's markers). The client retries
                # and succeeds; off here, the noise goes, and what it guards against (a late write of an
                # aborted transaction on a flaky network) needs a network this loopback broker lacks.
                "transaction.partition.verification.enable=false",
                *self._single_node(),
                *(f"{k}={v}" for k, v in self.properties.items()),
                "",
            ]
        )

    def _single_node(self) -> list[str]:
        """The embedded default, alone: its controller writes a no-op record to the metadata log
        whenever it was idle this long (500 ms by default), which the broker then fetches and
        applies: a broker with no client spent 2.3 % of a core idle, 1.5 % at 5 s (issue 40).
        Those records say the controller is alive to other nodes; here there are none."""
        return ["metadata.max.idle.interval.ms=5000"] if self.replicas == 1 else []

    def start(self, timeout: float = 90.0) -> "KafkaBroker":
        self.launch()
        return self.wait_started(timeout)

    def launch(self) -> None:
        """Format the data directory on first use and start the broker; `wait_started` waits for it."""
        libs = ensure_jars(self.cache)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        props = self.data_dir / "server.properties"
        props.write_text(self._properties())
        java = self.java(libs)
        if not (self.data_dir / "logs" / "meta.properties").exists():
            subprocess.run(
                [
                    *java,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    self.cluster_id,
                    "-c",
                    str(props),
                    "--ignore-formatted",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        with open(self.data_dir / "broker.log", "ab") as log:
            # Under a watchdog holding a lifeline to us: the broker dies with its parent.
            self._proc = subprocess.Popen(
                watchdog_argv([*java, "kafka.Kafka", str(props)], signal.SIGTERM, STOP_GRACE),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def java(self, libs: Path) -> list[str]:
        return ["java", *self.jvm, f"-Dlog4j2.configurationFile={HERE / 'log4j2.yaml'}", "-cp", f"{libs}/*"]

    def healthy(self) -> bool:
        return kafka_answers(self.port)

    def wait_started(self, timeout: float = 90.0) -> "KafkaBroker":
        wait_for_port(self.port, timeout, alive=self.alive)
        return self

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the broker, as a machine failure would (Linux): its watchdog is killed, and the
        kernel's parent-death signal (set by the watchdog) SIGKILLs the JVM at once, before any
        shutdown hook runs. Returns once the JVM has let go of its port."""
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.kill()
        self._proc.wait()
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        deadline = time.monotonic() + timeout
        while port_taken(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
