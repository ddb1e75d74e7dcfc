"""The weighted, seed-deterministic Version pick (WF-33: one pick per context, kept)."""

import hashlib
from collections import Counter

import pytest

from sumi.runtime.allocation import pick_version


def test_same_seed_same_version() -> None:  # WF-33
    allocation = [("v1", 30), ("v2", 70)]
    for seed in ("batch-1", "inst-é", "", "x" * 1000):
        assert len({pick_version(allocation, seed) for _ in range(5)}) == 1


def test_single_version_takes_everything() -> None:
    assert {pick_version([("only", 100)], str(i)) for i in range(200)} == {"only"}


def test_point_is_sha256_mod_100_over_cumulative_percentages() -> None:
    allocation = [("a", 10), ("b", 20), ("c", 70)]
    for i in range(300):
        seed = f"seed-{i}"
        point = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") % 100
        expected = "a" if point < 10 else "b" if point < 30 else "c"
        assert pick_version(allocation, seed) == expected


@pytest.mark.parametrize(
    "allocation",
    [
        [("v1", 50), ("v2", 50)],
        [("v1", 10), ("v2", 90)],
        [("v1", 1), ("v2", 24), ("v3", 25), ("v4", 50)],
    ],
)
def test_distribution_follows_percentages(allocation: list[tuple[str, int]]) -> None:
    n = 20_000
    counts = Counter(pick_version(allocation, f"batch-{i}") for i in range(n))
    for uid, pct in allocation:
        share = counts[uid] / n * 100
        assert abs(share - pct) < 1.5, (uid, share, pct)


def test_order_matters_but_stays_deterministic() -> None:
    # The Deployment's order is part of the allocation: the same list always maps alike.
    a = [pick_version([("x", 50), ("y", 50)], f"s{i}") for i in range(100)]
    b = [pick_version([("x", 50), ("y", 50)], f"s{i}") for i in range(100)]
    assert a == b


def test_empty_allocation_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one Version with a positive percentage"):
        pick_version([], "s")
    with pytest.raises(ValueError, match="at least one Version with a positive percentage"):
        pick_version([("v", 0)], "s")
