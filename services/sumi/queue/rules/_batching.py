"""When to hand over a batch (QC-4, QC-5, QC-6). Pure.

A batch goes out when the Consumer has a free slot (fewer than maxConcurrency
batches in flight) and either maxBatchSize messages are ready, the fill timeout
is 0, or the fill window opened maxBatchTimeoutSeconds ago. The window opens
when a slot is free and a first message is ready; it is a latency policy, not
state: after a restart it simply opens again.
"""

from dataclasses import dataclass

from sumi.runtime.allocation import pick_version  # per batch, seeded by the batch ID


@dataclass(frozen=True)
class Plan:
    send: bool
    window_opened: int | None  # the fill window to keep (None: closed)
    wake_at: int | None = None  # when to look again if nothing is sent


def plan(
    ready: int, in_flight: int, max_size: int, timeout_s: int, max_concurrency: int, window_opened: int | None, now: int
) -> Plan:
    if in_flight >= max_concurrency or ready == 0:
        return Plan(False, None if ready == 0 else window_opened)
    opened = now if window_opened is None else window_opened
    deadline = opened + timeout_s * 1000
    if ready >= max_size or now >= deadline:
        return Plan(True, None)
    return Plan(False, opened, deadline)


__all__ = ["Plan", "pick_version", "plan"]
