"""Driving the control processor's pure decisions in unit tests, as the runner does."""

import itertools
import json
from typing import Any

from sumi.control import ControlState, decide, evolve
from sumi.core import records as r

NOW = 1_700_000_000_000
_ids = itertools.count()


def command(
    kind: str,
    payload: dict[str, Any],
    *,
    space: str = "demo",
    cid: str | None = None,
    key: str | None = None,
    fp: str | None = None,
    principal: str = "alice",
) -> r.CommandSubmitted:
    return r.CommandSubmitted(cid or f"c{next(_ids)}", kind, space, principal, False, json.dumps(payload), NOW, key, fp)


def run(
    state: ControlState, cmd: r.CommandSubmitted, followups: bool = True, log: list[Any] | None = None
) -> list[Any]:
    """Decide, fold, and carry out follow-ups; returns every record decided."""
    out: list[Any] = []
    todo = [cmd]
    while todo:
        d = decide(state, todo.pop(0), NOW)
        for e in d.events:
            evolve(state, e)
        out += d.events
        if log is not None:
            log.extend(d.events)
        if followups:
            todo += d.followups
    return out


def reply(events: list[Any]) -> r.CommandDecided:
    return next(e for e in events if isinstance(e, r.CommandDecided))


def problem(events: list[Any]) -> dict[str, Any]:
    d = reply(events)
    assert not d.accepted, d
    return json.loads(d.problem or "{}")  # type: ignore[no-any-return]
