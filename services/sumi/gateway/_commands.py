"""Request-reply with the control processor (architecture.md rule 4).

The gateway decides nothing that needs state: it builds the typed command
(`sumi.core.commands`), appends it as a `CommandSubmitted` and waits for the
processor's `CommandDecided`, which a projection writes to the `decisions` table
(with the read-model rows it answers for, in the same transaction) and announces
with a notification (`_decisions`): the answer comes when the row does, with no
polling, and a read after it sees what it decided. The workflow engine's decisions
come straight from its log (`_logdecisions`) instead, and a read after one waits
for the projection to get there (`_positions`). No decision in time is
`503 backend_unavailable`; the client retries with the same Idempotency-Key and
gets the same decision.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.core import commands as c
from sumi.core.ids import new_ulid
from sumi.core.problems import Problem
from sumi.core.records import CommandSubmitted
from sumi.gateway import _reads as reads
from sumi.gateway._auth import Caller
from sumi.gateway._backend import Backend, Row, backend
from sumi.gateway._problems import stored_problem_response
from sumi.gateway._views import operation_json, with_rfc3339
from sumi.wire.codec import encode
from sumi.wire.topics import Location

# The decision of an earlier try of the same command, if any (read after listening).
Earlier = Callable[[], Awaitable[Row | None]]


@dataclass(frozen=True)
class Submission:
    command: c.Command
    space: str  # "" for token commands
    key: str  # the Kafka key: the Space, or ADMIN_KEY
    idempotency_key: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class Decision:
    accepted: bool
    status: int
    operation_id: str | None
    problem: dict[str, Any] | None
    result: Any
    position: Location | None = None  # where a decision read from the instance log lies (`_positions`)


def command_record(sub: Submission, caller: Caller, command_id: str) -> CommandSubmitted:
    try:
        return c.submitted(
            sub.command,
            command_id=command_id,
            space=sub.space,
            principal=caller.principal,
            admin=caller.admin,
            now=int(time.time() * 1000),
            idempotency_key=sub.idempotency_key,
            fingerprint=sub.fingerprint,
        )
    except ValueError as exc:  # not representable in canonical JSON (e.g. a lone surrogate)
        raise Problem("invalid_request", f"the request cannot be canonicalized: {exc}") from None


async def decide(request: Request, caller: Caller, command: Submission) -> Decision:
    """Append the command, then wait for its decision."""
    record = command_record(command, caller, new_ulid())
    return await request_reply(backend(request), "commands", command.key, record)


async def request_reply(
    db: Backend, topic: str, key: str, record: CommandSubmitted, earlier: Earlier | None = None
) -> Decision:
    """Append a command to `topic` under `key` and wait for its decision: the `decisions` row
    its processor's projection writes, or, for the workflow engine, its record on the instance
    log, whichever comes first.

    `earlier`: the command ID is derived (an Idempotency-Key), so an earlier try may have been
    decided already, its notification gone before this request listened; `earlier` reads its
    decision once after listening, before the append (a fresh ID needs no such read). One read
    per write: past capacity each round trip to Postgres is a wait for a core (issue 41)."""
    started, timeout = time.monotonic(), db.settings.decision_timeout
    answer = db.decisions.expect(record.commandId)
    try:
        if earlier is not None and (row := await earlier()) is not None:
            return as_decision(row)
        # One budget for append and decision: a broker that cannot take the command in time
        # is answered like a processor that cannot decide it in time.
        await asyncio.wait_for(db.send(db.settings.topic(topic), key, encode(record)), timeout)
        remaining = max(timeout - (time.monotonic() - started), 0.0)
        return as_decision(await asyncio.wait_for(answer, remaining))
    except TimeoutError:
        raise Problem("backend_unavailable", "no decision in time; retry with the same Idempotency-Key") from None
    finally:
        answer.cancel()


def as_decision(row: Row) -> Decision:
    return Decision(
        row["accepted"], row["status"], row["operation_id"], row["problem"], row["result"], row.get("position")
    )


async def respond(request: Request, decision: Decision) -> Response:
    """The decision as the contract's answer: a Problem, an Operation, or a result."""
    if not decision.accepted:
        problem = {"status": decision.status, **(decision.problem or {})}
        return stored_problem_response(problem, request.url.path)
    if decision.operation_id is not None:
        return await operation_response(request, decision.operation_id, decision.status)
    if decision.status == 204 or decision.result is None:
        return Response(status_code=decision.status)
    result = decision.result
    return JSONResponse(with_rfc3339(result) if isinstance(result, dict) else result, status_code=decision.status)


async def operation_response(request: Request, operation_id: str, status: int) -> Response:
    # The Operation precedes its decision on the control log, and the projection writes a
    # decision with everything before it: once decided, it is readable.
    row = await reads.operation(backend(request), operation_id)
    if row is None:
        raise Problem("backend_unavailable", "the Operation is not readable yet; retry")
    return JSONResponse(operation_json(row), status_code=status, headers={"Location": f"/v2/operations/{operation_id}"})


async def submit(request: Request, caller: Caller, command: Submission) -> Response:
    return await respond(request, await decide(request, caller, command))
