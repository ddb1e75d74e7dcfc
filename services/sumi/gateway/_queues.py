"""The AtLeastOnceQueue data plane (host-api.md section 4).

Sends are appended straight to the queue topic (the queue's own log, keyed by
its UID): accepting a message needs no decision beyond the body's shape and the
queue's existence, and `202` comes once the records are durable in Kafka. Stats and
peek read the queue projection; after a send through this gateway they first wait
until the projection has applied it (read your writes), so the wait is the reader's,
never the sender's. A peek's bodies are read from the queue log, where the projection's
rows say each message lies (the rows keep no bodies).
"""

import asyncio
import base64
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from sumi.control.rules.forms.names import QUEUE
from sumi.core.problems import Problem
from sumi.core.records import MessageAccepted
from sumi.core.times import rfc3339
from sumi.gateway import _reads as reads
from sumi.gateway._auth import Caller, authorize
from sumi.gateway._backend import Backend, Row, backend
from sumi.gateway._json import idempotency_key, read_object
from sumi.gateway._poll import poll
from sumi.gateway._query import bool_param, choice_param, int_param
from sumi.gateway._queue_input import Outgoing, message_ids, parse_messages
from sumi.gateway._routing import route
from sumi.wire.codec import encode

log = logging.getLogger("sumi.gateway")

# Sends go to a queue that exists and is not being deleted.
LIVE = ("active", "updating")


async def resolve_queue(request: Request, write: bool) -> tuple[Caller, Row]:
    space, ref = request.path_params["space"], request.path_params["uid"]
    caller = await authorize(request, space, write=write)
    row = await reads.queue(backend(request), space, QUEUE, ref)
    if row is None or (write and row["state"] not in LIVE):
        raise Problem("not_found", f"no AtLeastOnceQueue {ref!r} in Space {space!r}")
    return caller, row


async def send_messages(request: Request) -> Response:
    caller, queue = await resolve_queue(request, write=True)
    key = idempotency_key(request.headers.get("idempotency-key"), required=False)
    messages = parse_messages(await read_object(request, {"messages"}))
    ids = message_ids(queue["uid"], caller.principal, key, len(messages))
    db = backend(request)
    # A replay re-derives the same IDs; whatever the projection already holds was appended.
    # Without a key the IDs are fresh ULIDs: nothing can hold them yet, so nothing to look up.
    # With one, what this gateway appended to the queue is first read back (it may be this
    # request's first try, answered a moment ago): a replay after a 202 appends nothing new.
    # A replay after a 503 whose first try's append is still on its way can append the IDs
    # again; the engine and the projection take each ID once (docs/decisions.md).
    if key:
        await _read_your_writes(db, queue["uid"])
    known = await reads.known_messages(db, ids) if key else set()
    todo = [(mid, m) for mid, m in zip(ids, messages, strict=True) if mid not in known]
    if todo:
        await _append(db, request.path_params["space"], queue["uid"], caller, key, todo)
    return JSONResponse({"messageIds": ids}, status_code=202)


async def _append(
    db: Backend, space: str, queue_uid: str, caller: Caller, key: str | None, todo: list[tuple[str, Outgoing]]
) -> None:
    now = int(time.time() * 1000)
    records = [
        encode(
            MessageAccepted(
                queueUid=queue_uid,
                space=space,
                messageId=mid,
                body=m.body,
                acceptedAt=now,
                visibleAt=now + m.delay_seconds * 1000,
                principal=caller.principal,
                idempotencyKey=key,
            )
        )
        for mid, m in todo
    ]
    # Bounded like a command: on timeout the client retries with its Idempotency-Key, which
    # re-derives the same message IDs (the projection keeps the first of any duplicate).
    metas = await asyncio.wait_for(
        db.send_in_order(db.settings.topic("queue"), queue_uid, records), db.settings.decision_timeout
    )
    db.written.note(queue_uid, metas[-1].partition, metas[-1].offset)


async def _read_your_writes(db: Backend, queue_uid: str) -> None:
    """Stats and peek after a 202 from this gateway include the messages it accepted."""
    written = db.written.get(queue_uid)
    if written is None:
        return
    partition, offset = written
    topic = db.settings.topic("queue")

    async def caught_up() -> bool | None:
        next_offset = (await reads.projection_offsets(db, "queue", topic, [partition])).get(partition)
        return True if next_offset is not None and next_offset > offset else None

    if await poll(caught_up, db.settings.decision_timeout, first=0.002, cap=0.02) is None:
        log.warning("queue projection behind %s[%d]@%d", topic, partition, offset)  # answered as it stands
    else:
        db.written.forget(queue_uid, written)


async def queue_stats(request: Request) -> Response:
    _, queue = await resolve_queue(request, write=False)
    await _read_your_writes(backend(request), queue["uid"])
    stats = await reads.queue_stats(backend(request), queue["uid"])
    return JSONResponse(
        {
            "ready": stats["ready"],
            "delayed": stats["delayed"],
            "inFlight": stats["in_flight"],
            "acknowledged": stats["acknowledged"],
            "retried": stats["retried"],
            "deadLettered": stats["dead_lettered"],
            "discarded": stats["discarded"],
            "observedAt": rfc3339(stats["observed_at"]),
        }
    )


async def peek_messages(request: Request) -> Response:
    _, queue = await resolve_queue(request, write=False)
    state = choice_param(request, "state", ("ready", "delayed", "inFlight"))
    limit = int_param(request, "limit", 100, 1, 1000)
    with_body = bool_param(request, "includeBody", False)
    db = backend(request)
    await _read_your_writes(db, queue["uid"])
    rows = await reads.peek(db, queue["uid"], state, limit)
    items = [_peek_item(r) for r in rows]
    if with_body and rows:
        bodies = await db.bodies([(r["log_partition"], r["log_offset"]) for r in rows])
        for item, row in zip(items, rows, strict=True):
            body = bodies.get((row["log_partition"], row["log_offset"]))
            if body is None:  # the read model names a record the log no longer has
                raise Problem("backend_unavailable", "a message's body could not be read from the queue log")
            item["body"] = base64.b64encode(body).decode()
    return JSONResponse({"items": items})


def _peek_item(row: Row) -> dict[str, Any]:
    return {
        "id": row["message_id"],
        "timestamp": round(row["accepted_at"].timestamp() * 1000),
        "attempts": row["attempts"],
        "state": row["peek_state"],
        "size": row["size"],
    }


routes = [
    route("/v2/spaces/{space}/queues/{uid}/messages", POST=send_messages, GET=peek_messages),
    route("/v2/spaces/{space}/queues/{uid}/stats", GET=queue_stats),
]
