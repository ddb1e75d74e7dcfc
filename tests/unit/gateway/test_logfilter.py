"""The worker logs route's `since` (host-api.md section 8): an RFC 3339 time, read as epoch ms."""

import pytest

from sumi.core.problems import Problem
from sumi.gateway._logfilter import parse_since


def test_since_is_epoch_ms() -> None:
    # DOC-1: a log query's time bound is the time the client wrote
    assert parse_since("2026-12-02T06:00:00Z") == 1_796_191_200_000
    assert parse_since(None) is None


def test_since_before_1970_is_from_the_beginning() -> None:
    # DOC-1: a valid time Kafka's time index cannot take is read as the start, never a 5xx
    assert parse_since("0001-01-01T00:00:00Z") == 0


@pytest.mark.parametrize("raw", ["yesterday", "2026-12-02T06:00:00"])
def test_since_without_a_zone_or_a_time_is_refused(raw: str) -> None:
    # DOC-1: a bad bound is a Problem of the contract
    with pytest.raises(Problem) as caught:
        parse_since(raw)
    assert caught.value.code == "invalid_request"
