"""Where the workflow engine's records go that are no facts of its instance log: one table,
read by the engine's `emit`.

Everything else an engine emits is the instance log's (sealed and folded there). A control
command (a Workflow's instance counts, a delete's report) goes to the control plane's
`commands`, keyed by its Space; a queue binding's send to `queue`, keyed by its queue; a
workflow command (a Caller Binding's call to an instance another replica decides) to
`workflow.commands`, keyed by that instance, so its owner reads it like any other command.
"""

from collections.abc import Callable
from typing import Any

from sumi.core import records as r
from sumi.workflow import commands as c

# record type -> (the record, the key it was emitted under) -> (topic name, key on that topic)
_ROUTES: dict[type, Callable[[Any, str], tuple[str, str]]] = {
    r.CommandSubmitted: lambda rec, key: ("workflow.commands", key) if rec.kind in c.KINDS else ("commands", rec.space),
    r.MessageAccepted: lambda rec, key: ("queue", rec.queueUid),
}


def elsewhere(rec: r.Record, key: str) -> tuple[str, str] | None:
    """(topic name, key) of a record bound for another topic; None for the instance log's own."""
    route = _ROUTES.get(type(rec))
    return None if route is None else route(rec, key)
