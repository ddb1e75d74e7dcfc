"""The broker and the database a test session runs on, in the order of what is at hand:
the settings' own (SUMI_KAFKA_BOOTSTRAP, SUMI_DATABASE_URL: an external one), testcontainers
where Docker answers, the local launchers."""

from collections.abc import Iterator
from contextlib import contextmanager

from sumi.core.config import Settings
from sumi.infra import KafkaBroker, PostgresServer


def docker_reachable() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


@contextmanager
def kafka_bootstrap(settings: Settings) -> Iterator[str]:
    if not settings.launch_kafka:
        yield settings.kafka_bootstrap
    elif docker_reachable():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("apache/kafka:4.1.1").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        with KafkaBroker(cache=settings.cache_dir) as broker:
            yield broker.bootstrap


@contextmanager
def database_url(settings: Settings) -> Iterator[str]:
    if not settings.launch_postgres:
        yield settings.database_url
    elif docker_reachable():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:17", driver=None) as pg:
            yield pg.get_connection_url()
    else:
        with PostgresServer() as pg:
            yield pg.url
