"""Local launchers for the real parts: an Apache Kafka broker (or a cluster of three) and a PostgreSQL server.

Used by `sumi up` and by the test fixtures on machines without a Docker engine. `lifeline` makes a
child die with its parent: each launcher runs its server under its watchdog, and the Host's
supervisor its services.
"""

from sumi.infra._cluster import KafkaCluster
from sumi.infra._kafka import BROKER_JVM, KafkaBroker
from sumi.infra._ports import free_port, port_taken
from sumi.infra._postgres import PostgresServer
from sumi.infra._watched import Watched

__all__ = ["BROKER_JVM", "KafkaBroker", "KafkaCluster", "PostgresServer", "Watched", "free_port", "port_taken"]
