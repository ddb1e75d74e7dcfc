"""Reads that see the writes before them, without the writes waiting for the projection.

A workflow command is answered as soon as its decision is on the instance log
(`_logdecisions`), before the workflow projection has applied it. The answer says where the
decision lies (`Sumi-Position: <partition>-<offset>`, docs/decisions.md), and a read of that
instance waits, bounded, until the projection has applied that offset of that partition
(`projection_offsets`, written in the transaction of the rows; `_readafter`): the rows of
everything up to the decision are then readable. The position comes from the request (a client that sends the header
back reads its write through any gateway), or from what this gateway remembers of the writes
it answered (`Positions`: per instance and per Workflow, bounded, forgotten once a read saw
the projection past them).
"""

from collections import OrderedDict

from sumi.core.problems import Problem
from sumi.wire.topics import Location

HEADER = "Sumi-Position"


def header(at: Location) -> dict[str, str]:
    return {HEADER: f"{at[0]}-{at[1]}"}


def parse(value: str, partitions: int) -> Location:
    partition, sep, offset = value.strip().partition("-")
    if sep and partition.isdigit() and offset.isdigit() and int(partition) < partitions:
        return int(partition), int(offset)
    raise Problem("invalid_request", f"{HEADER} is <partition>-<offset>, as a write's answer gave it")


class Positions:
    """Where the latest writes this gateway answered lie, per key (an instance, a Workflow): one
    offset per partition, the latest. Bounded: the least recently written keys go first."""

    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._at: OrderedDict[str, dict[int, int]] = OrderedDict()

    def note(self, key: str, at: Location) -> None:
        offsets = self._at.setdefault(key, {})
        offsets[at[0]] = max(offsets.get(at[0], -1), at[1])
        self._at.move_to_end(key)
        if len(self._at) > self.limit:
            self._at.popitem(last=False)

    def get(self, key: str) -> list[Location]:
        return list(self._at.get(key, {}).items())

    def forget(self, key: str, seen: list[Location]) -> None:
        offsets = self._at.get(key)
        if offsets is None:
            return
        for partition, offset in seen:
            if offsets.get(partition) == offset:  # not a later write's
                del offsets[partition]
        if not offsets:
            del self._at[key]
