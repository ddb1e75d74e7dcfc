"""Weighted, deterministic-by-seed choice of a Version from a Deployment's allocation.

Each execution context picks one Version at its start and keeps it (WF-33); a
queue batch picks one per batch. The pick depends only on the allocation and
the seed (a batch ID, an instance ID plus attempt…), so a replay of the same
decision picks the same Version.
"""

import hashlib
from collections.abc import Sequence


def pick_version(allocation: Sequence[tuple[str, int]], seed: str) -> str:
    """sha256(seed) -> a point in 0..99 -> the entry whose cumulative percentage covers it.

    `allocation` is [(version uid, percentage)] in the Deployment's order; percentages
    are positive and sum to 100 (a WorkerDeployment guarantees it). Any other positive
    total is scaled to it, so the function never fails on a well-formed list."""
    entries = [(uid, pct) for uid, pct in allocation if pct > 0]
    if not entries:
        raise ValueError("an allocation needs at least one Version with a positive percentage")
    total = sum(pct for _, pct in entries)
    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).digest()
    point = int.from_bytes(digest[:8], "big") % total  # 0..99 for a proper allocation
    cumulative = 0
    for uid, pct in entries:
        cumulative += pct
        if point < cumulative:
            return uid
    return entries[-1][0]  # unreachable: point < total
