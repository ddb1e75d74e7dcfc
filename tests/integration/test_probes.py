"""The supervisor's probes tell a server that answers from one that only accepts connections
(issue 20 item 0): a SIGSTOPped or wedged server still completes handshakes from its backlog."""

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import pytest

from sumi.infra._probe import kafka_answers, postgres_answers

pytestmark = pytest.mark.integration


@contextmanager
def silent_listener() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])


def test_a_running_broker_answers_and_a_silent_port_does_not(kafka_bootstrap: str) -> None:
    # QC-43: a wedged broker is found out and restarted, a live one is left alone.
    assert kafka_answers(int(kafka_bootstrap.rsplit(":", 1)[1]))
    with silent_listener() as port:
        assert not kafka_answers(port, timeout=1.0)


def test_a_running_database_answers_and_a_silent_port_does_not(database_url: str) -> None:
    # QC-43
    assert postgres_answers(database_url)
    url = urlparse(database_url)
    with silent_listener() as port:
        assert not postgres_answers(url._replace(netloc=f"{url.username}@127.0.0.1:{port}").geturl(), timeout=1.0)
