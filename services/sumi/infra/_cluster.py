"""A KRaft Apache Kafka cluster of several brokers on the local JVM, so the multi-machine
story (replicated topics, a leader that moves when its broker dies) runs on one machine too.

Each node is a `KafkaBroker` in combined mode (broker and controller), all of them voters of
one quorum: with three, one may die and the quorum, every partition leader and every
transaction go on. Internal topics get three replicas and need two in sync; the Host's own
topics get what `Settings.replication` says (`sumi.wire.topics`), and take two in sync too.
"""

import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Self

from sumi.infra._kafka import KafkaBroker
from sumi.infra._ports import free_port


class KafkaCluster:
    """`size` brokers (three by default); `bootstrap` names them all, as clients take it.

    Starts and stops like a `KafkaBroker` (`start`, or `launch` then `wait_started`; `terminate`,
    `stop`), so `sumi up` handles either the same way; `kill(i)` and `restart(i)` act on one node.
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        ports: Sequence[int] | None = None,
        size: int = 3,
        cache: str = "",
        jvm: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="sumi-kafka-cluster-"))
        self._scratch = None if data_dir is not None else self.data_dir
        ports = list(ports) if ports is not None else [free_port() for _ in range(size)]
        if len(ports) != size or size < 1:
            raise ValueError(f"a cluster of {size} brokers needs {size} ports, got {len(ports)}")
        replicas = min(size, 3)
        self.brokers = [
            KafkaBroker(self.data_dir / f"node-{i}", port=port, node_id=i, replicas=replicas, cache=cache, jvm=jvm)
            for i, port in enumerate(ports, start=1)
        ]
        voters = ",".join(f"{b.node_id}@127.0.0.1:{b.controller_port}" for b in self.brokers)
        cluster_id = self._cluster_id()
        for broker in self.brokers:
            broker.voters, broker.cluster_id = voters, cluster_id
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers)

    def _cluster_id(self) -> str:
        # Kept beside the nodes: a node formatted on a later start (its first one was cut short)
        # must join the cluster the others were formatted into.
        path = self.data_dir / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(self.brokers[0].cluster_id)
        return self.brokers[0].cluster_id

    def start(self, timeout: float = 120.0) -> Self:
        self.launch()
        return self.wait_started(timeout)

    def launch(self) -> None:
        """Start every node; none can serve before a majority of the voters runs. Side by side:
        the first start formats each node's storage, a JVM run of its own (seconds each)."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(KafkaBroker.launch, self.brokers))

    def wait_started(self, timeout: float = 120.0) -> Self:
        for broker in self.brokers:
            broker.wait_started(timeout)
        return self

    def kill(self, index: int) -> None:
        """SIGKILL node `index` (0-based), as a machine failure would."""
        self.brokers[index].kill()

    def restart(self, index: int, timeout: float = 90.0) -> None:
        """Start a killed node again on its data, ports and identity."""
        self.brokers[index].launch()
        self.brokers[index].wait_started(timeout)

    def terminate(self) -> None:
        for broker in self.brokers:
            broker.terminate()

    def stop(self) -> None:
        for broker in self.brokers:
            broker.terminate()  # side by side: each waits out its own grace alone otherwise
        for broker in self.brokers:
            broker.stop()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
