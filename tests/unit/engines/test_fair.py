"""sumi.engines.fair: shared slots divided among Spaces (Space isolation, issue 21)."""

import asyncio

import pytest

from sumi.engines.fair import FairSlots, admit


async def _hold(slots: FairSlots, space: str, order: list[str], release: asyncio.Event) -> None:
    async with slots.slot(space):
        order.append(space)
        await release.wait()


async def test_a_space_never_takes_more_than_its_share() -> None:
    # QC-6, WF-3: one Space's burst leaves room for another's first load
    slots = FairSlots(total=4, per_space=2)
    order: list[str] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(_hold(slots, "a", order, release)) for _ in range(10)]
    await asyncio.sleep(0.01)
    assert slots.held == {"a": 2}
    b = asyncio.create_task(_hold(slots, "b", order, release))
    await asyncio.sleep(0.01)
    assert slots.held == {"a": 2, "b": 1}, "b was served at once, beside a's waiters"
    release.set()
    await asyncio.gather(*tasks, b)
    assert slots.held == {} and order.count("a") == 10


async def test_waiting_spaces_are_served_in_turn() -> None:
    # Space isolation: a Space with many waiters and one with a few alternate
    slots = FairSlots(total=1, per_space=1)
    order: list[str] = []
    gates = {s: asyncio.Event() for s in ("first", "a", "b")}
    first = asyncio.create_task(_hold(slots, "first", order, gates["first"]))
    await asyncio.sleep(0)
    many = [asyncio.create_task(_hold(slots, "a", order, gates["a"])) for _ in range(4)]
    few = [asyncio.create_task(_hold(slots, "b", order, gates["b"])) for _ in range(2)]
    await asyncio.sleep(0)
    for gate in gates.values():
        gate.set()
    await asyncio.gather(first, *many, *few)
    assert order == ["first", "a", "b", "a", "b", "a", "a"]


async def test_a_cancelled_waiter_loses_no_slot() -> None:
    # QC-42-like bookkeeping: a stopped asker neither keeps nor loses a slot
    slots = FairSlots(total=1, per_space=1)
    release = asyncio.Event()
    order: list[str] = []
    holder = asyncio.create_task(_hold(slots, "a", order, release))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(_hold(slots, "b", order, release))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    await holder
    assert slots.held == {}
    await asyncio.wait_for(_hold(slots, "c", order, release), 1)
    assert order == ["a", "c"]


async def test_a_slot_granted_to_a_cancelled_waiter_is_given_back() -> None:
    slots = FairSlots(total=1, per_space=1)
    await slots.acquire("a")
    waiter = asyncio.create_task(slots.acquire("b"))
    await asyncio.sleep(0)
    slots.release("a")  # granted to b's future, and b is cancelled before it runs
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert slots.held == {}
    await asyncio.wait_for(slots.acquire("c"), 1)


def test_slots_are_at_least_one() -> None:
    with pytest.raises(ValueError):
        FairSlots(total=0, per_space=1)


def test_admit_takes_one_per_space_in_turn() -> None:
    # Space isolation (issue 21): a Space with many runnable instances does not go first with all of them
    waiting = {"a": ["a1", "a2", "a3", "a4"], "b": ["b1"], "c": ["c1", "c2"]}
    assert admit(waiting, {}, free=5, per_space=10) == ["a1", "b1", "c1", "a2", "c2"]


def test_admit_keeps_each_space_to_its_share() -> None:
    waiting = {"a": ["a1", "a2", "a3"], "b": ["b1", "b2"]}
    assert admit(waiting, {"a": 2}, free=10, per_space=3) == ["a1", "b1", "b2"]
    assert admit(waiting, {"a": 3, "b": 3}, free=10, per_space=3) == []
    assert admit({}, {}, free=3, per_space=3) == []
