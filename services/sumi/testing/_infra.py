"""The broker and the database a test session runs on, in the order of what is at hand:
the SUMI_* variables (an external one), testcontainers where Docker answers, the local launchers."""

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sumi.infra import KafkaBroker, PostgresServer


def docker_reachable() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


@contextmanager
def kafka_bootstrap() -> Iterator[str]:
    if os.environ.get("SUMI_KAFKA_BOOTSTRAP"):
        yield os.environ["SUMI_KAFKA_BOOTSTRAP"]
    elif docker_reachable():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.1").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        with KafkaBroker() as broker:
            yield broker.bootstrap


@contextmanager
def database_url() -> Iterator[str]:
    if os.environ.get("SUMI_DATABASE_URL"):
        yield os.environ["SUMI_DATABASE_URL"]
    elif docker_reachable():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:17", driver=None) as pg:
            yield pg.get_connection_url()
    else:
        with PostgresServer() as pg:
            yield pg.url
