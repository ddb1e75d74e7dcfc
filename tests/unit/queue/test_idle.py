"""An idle queue engine sleeps: with nothing it can deliver, its step names no wakeup in the
past (the clock would step again at once, for ever), only the next due time or none."""

from sumi.core import records as r
from sumi.core.clock import idle_timeout, now_ms
from sumi.core.config import Settings
from sumi.queue.engine import Engine
from sumi.queue.rules import _decide as d
from sumi.queue.rules._state import EngineState, evolve

T0 = 1_700_000_000_000


def engine() -> Engine:
    return Engine(Settings(kafka_bootstrap="127.0.0.1:1", database_url="postgresql://unused"), workflows=None)  # type: ignore[arg-type]


def test_a_due_message_nobody_delivers_asks_for_no_wakeup() -> None:
    # QC-34: a dead-letter queue without a Consumer holds its messages, due since they came.
    e = engine()
    now = now_ms()
    evolve(e.state, r.MessageAccepted("dlq", "demo", "m1", b"x", now - 5_000, now - 5_000))
    assert e.step() is None
    assert idle_timeout(e.step(), now_ms(), None) is None  # waits on an event alone


def test_a_delayed_message_nobody_delivers_wakes_the_engine_when_it_is_due() -> None:
    # QC-27: a message becomes deliverable at its visibleAt; until then the engine sleeps.
    e = engine()
    now = now_ms()
    evolve(e.state, r.MessageAccepted("q", "demo", "m1", b"x", now, now + 60_000))
    assert e.step() == now + 60_000
    assert 59 < (idle_timeout(now + 60_000, now, None) or 0) <= 60


def test_the_retention_sweep_is_due_when_the_oldest_message_expires() -> None:
    state = EngineState()
    assert d.next_expiry(state, "q", 60) is None
    evolve(state, r.MessageAccepted("q", "demo", "old", b"x", T0, T0))
    evolve(state, r.MessageAccepted("q", "demo", "new", b"x", T0 + 5_000, T0 + 5_000))
    assert d.next_expiry(state, "q", 60) == T0 + 60_000
