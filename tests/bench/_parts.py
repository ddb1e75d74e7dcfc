"""The real broker and database a benchmark runs on: the ones SUMI_KAFKA_BOOTSTRAP and
SUMI_DATABASE_URL name, else local ones started for the run and stopped after it."""

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def parts() -> Iterator[tuple[str, str]]:
    """(Kafka bootstrap, database URL)."""
    from sumi.infra import KafkaBroker, PostgresServer

    with contextlib.ExitStack() as stack:
        kafka = os.environ.get("SUMI_KAFKA_BOOTSTRAP") or stack.enter_context(KafkaBroker()).bootstrap
        db = os.environ.get("SUMI_DATABASE_URL") or stack.enter_context(PostgresServer()).url
        yield kafka, db
