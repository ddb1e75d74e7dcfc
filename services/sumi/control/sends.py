"""The messages a `queue.send` host call appends (QC-25), from a queue handler or a workflow run.

The check is the same from both engines: the binding must name a live queue of the
calling Version (its own Space); a body is at most `MAX_BODY` bytes. It lives beside the
control fold it reads, not in `sumi.engines`: the engine shell there sits below control. The caller
appends the records through its own outbox and resolves the call once they committed.
"""

import base64
from collections.abc import Callable
from typing import Any, Protocol

from sumi.control.rules.forms import ResourceView
from sumi.control.rules.state import LIVE, VersionView
from sumi.core import records as r
from sumi.runtime import HostError

MAX_BODY = 127_000


class Queues(Protocol):
    """The control fold's view of the queues (either engine's control table)."""

    def queue(self, uid: str) -> ResourceView | None: ...


def sent(
    control: Queues, code: VersionView, args: dict[str, Any], now: int, new_id: Callable[[str], str]
) -> list[r.MessageAccepted]:
    """The messages of a queue binding's `queue.send` (a queue handler's or a workflow run's), or a HostError."""
    target = code.queue_bindings.get(str(args.get("binding")))
    queue = control.queue(target) if target else None
    if queue is None or queue.state not in LIVE:
        raise HostError("backend_unavailable", "the bound queue is not available")
    records = []
    for m in args.get("messages") or []:
        body = base64.b64decode(m["body"])
        if len(body) > MAX_BODY:
            raise HostError("message_too_large", f"a body is limited to {MAX_BODY} bytes")
        delay = int(m.get("delaySeconds") or 0)
        accepted_by = f"worker:{code.uid}"
        # a binding names a queue of the Version's own Space (resolve)
        records.append(
            r.MessageAccepted(queue.uid, code.space, new_id("msg"), body, now, now + delay * 1000, accepted_by)
        )
    return records
