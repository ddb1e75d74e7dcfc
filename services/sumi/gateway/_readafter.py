"""A read of workflow instances waits for the writes before it (`_positions`), bounded."""

from starlette.requests import Request

from sumi.core.problems import Problem
from sumi.gateway import _reads as reads
from sumi.gateway._backend import Backend
from sumi.gateway._poll import poll
from sumi.gateway._positions import HEADER, parse

READ_WAIT_S = 2.0  # then 503: the projection is behind, the client comes back (Retry-After)


async def read_after(request: Request, db: Backend, *keys: str) -> None:
    """Wait until the workflow projection has applied what the request's header names and what
    this gateway answered for these keys; `backend_unavailable` after `READ_WAIT_S`."""
    sent = request.headers.get(HEADER)
    wanted = [parse(sent, db.settings.partitions)] if sent else []
    if wanted:
        partition, offset = wanted[0]
        end = await db.log_decisions.end(partition)
        if end is not None and offset >= end:  # would never be applied: not a retry's business
            raise Problem("invalid_request", f"{HEADER} names a place past the end of the instance log")
    remembered = {key: db.positions.get(key) for key in keys}
    for at in remembered.values():
        wanted += at
    if not wanted:
        return
    topic = db.settings.topic("workflow")
    needed: dict[int, int] = {}
    for partition, offset in wanted:
        needed[partition] = max(needed.get(partition, -1), offset)

    async def caught_up() -> bool | None:
        applied = await reads.projection_offsets(db, "workflow", topic, list(needed))
        return True if all(applied.get(p, 0) > o for p, o in needed.items()) else None

    if await poll(caught_up, READ_WAIT_S, first=0.002, cap=0.02) is None:
        raise Problem("backend_unavailable", "the read side has not caught up with this write yet; retry")
    for key, at in remembered.items():
        db.positions.forget(key, at)
