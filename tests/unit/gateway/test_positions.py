"""The positions a read after a workflow write waits for (sumi.gateway._positions)."""

import pytest

from sumi.core.problems import Problem
from sumi.gateway._positions import Positions, header, parse


def test_the_header_round_trips_and_a_bad_one_is_invalid_request() -> None:
    # WF-20: a read sent with its write's position never reads an older state.
    assert parse(header((3, 1042))["Sumi-Position"], 4) == (3, 1042)
    for bad in ("", "3", "3-", "-1", "a-1", "3-1-2", "4-0", "3--1"):
        with pytest.raises(Problem) as caught:
            parse(bad, 4)
        assert caught.value.code == "invalid_request"


def test_positions_keep_the_latest_per_partition_and_forget_only_what_was_seen() -> None:
    # WF-20: a later write through this gateway is still waited for after a read saw an earlier one.
    positions = Positions(limit=2)
    positions.note("wf", (0, 5))
    positions.note("wf", (1, 7))
    positions.note("wf", (0, 3))  # an older offset never moves the position back
    seen = positions.get("wf")
    assert sorted(seen) == [(0, 5), (1, 7)]
    positions.note("wf", (1, 9))
    positions.forget("wf", seen)
    assert positions.get("wf") == [(1, 9)]
    positions.note("a", (0, 1))
    positions.note("b", (0, 1))  # over the limit: the least recently written goes
    assert positions.get("wf") == [] and positions.get("b") == [(0, 1)]
