"""A Caller Binding's call to an instance another replica decides, sent through the log.

The call becomes the typed command a gateway would send: a `CommandSubmitted` on
`workflow.commands`, keyed by the target's instance, with the caller's principal
(`worker:<versionUid>`) and Space, committed through the engine's outbox (`_routes`). The
target's owner decides it like any command, and the answer is its `CommandDecided`, read back
from the target's partition of the instance log (`replies`). `get` and `status()` need the
target's state, which only its owner holds: they ask with a query (`instance.status`), answered
with the status document sealed under a key of this call's own.

No answer in time is `backend_unavailable` (WF-27). A call whose context stops while it waits
is cancelled; its command is still decided by the owner, as a gateway client's that went away.
"""

import asyncio
import base64
import json
import logging
import os
from typing import Any, Protocol

from sumi.core import records as r
from sumi.core import sealing
from sumi.core.clock import now_ms
from sumi.core.problems import Problem
from sumi.wire.topics import partition_for
from sumi.workflow import commands as c
from sumi.workflow.replies import Replies
from sumi.workflow.rules import _decide as d

REPLY_KEY_BYTES = 32

log = logging.getLogger("sumi.workflow")


class Submitter(Protocol):
    """What a call through the log needs of the engine: its outbox and its reader of answers."""

    replies: Replies

    def emit(self, key: str, records: list[r.Record]) -> "asyncio.Future[None]": ...


class Remote:
    def __init__(self, engine: Submitter, partitions: int, timeout: float) -> None:
        self.engine = engine
        self.partitions = partitions
        self.timeout = timeout

    async def decided(self, key: str, cmd: c.WorkflowCommand, caller: d.Caller) -> r.CommandDecided:
        """Submit the command for the instance `key` and wait for its owner's decision."""
        rec = c.submitted(
            cmd, command_id=caller.command_id, space=caller.space, principal=caller.principal, now=now_ms()
        )
        partition = partition_for(key, self.partitions)
        try:
            async with asyncio.timeout(self.timeout):
                async with self.engine.replies.expect(caller.command_id, partition) as answer:
                    await self._committed(key, rec)
                    return await answer
        except TimeoutError:
            raise Problem("backend_unavailable", "the instance's owner did not decide in time") from None

    async def _committed(self, key: str, rec: r.CommandSubmitted) -> None:
        try:
            await self.engine.emit(key, [rec])
        except Exception as exc:  # the outbox failed: the engine ends, this caller hears it first
            raise Problem("backend_unavailable", f"the command could not be committed: {exc!r}") from None

    async def status(self, key: str, uid: str, iid: str, caller: d.Caller) -> dict[str, Any]:
        """WF-20, WF-21: the owner's status document, opened with this call's one-time key."""
        secret = os.urandom(REPLY_KEY_BYTES)
        query = c.QueryInstance(uid, iid, base64.urlsafe_b64encode(secret).decode())
        sealed = answer_of(await self.decided(key, query, caller))
        plain = sealing.unseal(r.DataKey(caller.command_id, uid, iid, secret, 0), str(sealed))
        if plain is None:
            log.error("workflow binding status: instance %s: the owner's answer did not open", key)
            raise Problem("backend_unavailable", "the owner's answer could not be opened")
        document: dict[str, Any] = json.loads(plain)
        return document


def answer_of(answer: r.CommandDecided) -> Any:
    """The decision as the binding's answer: its result, or its Problem raised."""
    if not answer.accepted:
        raise Problem.from_json(json.loads(answer.problem or "{}"))
    return json.loads(answer.result) if answer.result else None
