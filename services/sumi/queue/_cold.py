"""A queue's backlog past its hot window, as compact columns (docs/decisions.md, "A backlog is columns").

As Python objects a pending message costs about 600 B (its Message, its ID, its heap
entries, its dict slot), so a backlog of a million does not fit a few hundred MB. Past a
queue's hot window (`Settings.queue_hot_messages`) the state keeps each further pending
message here instead: its ID's bytes and a few machine integers, under 100 B, no body (that
stays in the log). Rows leave from the head in acceptance order as batches take them
(`QueueState.peek_ready`); one leaves out of order only when the log says so (a retention
discard, a delivery decided before a restart moved the window).

Finding a row by its ID (a re-sent append, a discard) goes through an index of segments of
`_SEGMENT` rows: the newest, still filling, is a dict from the ID's hash to its row; a full
one is sealed into an array sorted by hash, searched by bisection (in C, about 1 µs), and
sealed segments of equal size merge (up to `_MERGED` rows), so a look-up searches a few. Hashes are Python's, so
they hold in this process only; nothing here is written anywhere.
"""

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, chain, islice, repeat
from operator import add, and_, or_, sub

# A row as it leaves: (id, seq, acceptedAt, visibleAt, (partition, offset)); a row is visible
# on acceptance, so visibleAt is acceptedAt.
Row = tuple[str, int, int, int, tuple[int, int]]

_COMPACT_AT = 1 << 16  # rows gone from the front before the columns are cut
_SEGMENT = 1 << 16  # rows an index segment is sealed at (sorting them: tens of ms)
_MERGED = 1 << 20  # sealed segments of equal size merge up to this many rows: few to search
_PLACE = (1 << 24) - 1  # a row's place in its segment (merged segments stay well under 2**24)
_TOP = ~_PLACE


class _Segment:
    """The index of rows [lo, lo + n): by hash, to their rows. While filling, a dict from
    hash to its latest row; sealed, one array sorted by the hash's top 40 bits packed with
    the row's place in the segment (low 24 bits), so equal tops lie together, oldest first."""

    __slots__ = ("lo", "n", "open", "packed")

    def __init__(self, lo: int) -> None:
        self.lo = lo
        self.n = 0
        self.open: dict[int, int] | None = {}
        self.packed = array("q")

    @property
    def hi(self) -> int:
        return self.lo + self.n

    def add(self, h: int, row: int) -> None:
        assert self.open is not None
        self.open[h] = row
        self.n += 1

    def extend(self, hashes: list[int], row: int) -> None:
        """Rows row, row + 1, ... with these hashes (the latest row of a hash wins, as in `add`)."""
        assert self.open is not None
        self.open.update(zip(hashes, range(row, row + len(hashes)), strict=True))
        self.n += len(hashes)

    @classmethod
    def sealed(cls, lo: int, hashes: list[int]) -> "_Segment":
        """A segment of rows lo, lo + 1, ... with these hashes, sealed at once (a bulk restore)."""
        segment = cls(lo)
        segment.open = None
        segment.n = len(hashes)
        segment.packed = _packed(hashes, range(len(hashes)))
        return segment

    def full(self) -> bool:
        return self.open is not None and self.n >= _SEGMENT

    def seal(self) -> None:
        assert self.open is not None
        self.packed = _packed(self.open.keys(), map(sub, self.open.values(), repeat(self.lo)))
        self.open = None

    def merge(self, later: "_Segment") -> None:
        """Take in the sealed segment right after this one: its places shift by this one's
        size (its order stays), and timsort merges the two sorted runs in linear time."""
        shift = self.n
        self.packed = array("q", sorted(chain(self.packed, map(add, later.packed, repeat(shift)))))
        self.n += later.n

    def rows(self, h: int) -> list[int]:
        """The rows here whose ID's hash may be `h` (same top 40 bits), oldest first."""
        if self.open is not None:
            row = self.open.get(h)
            return [] if row is None else [row]
        top = h & _TOP
        i = bisect_left(self.packed, top)  # in C: about 1 µs
        out = []
        while i < len(self.packed) and (self.packed[i] & _TOP) == top:
            out.append(self.lo + (self.packed[i] & _PLACE))
            i += 1
        return out


def _packed(hashes: Iterable[int], places: Iterable[int]) -> array:  # type: ignore[type-arg]
    """Each hash's top bits with its row's place, sorted (C loops only: a million in ~0.3 s)."""
    return array("q", sorted(map(or_, map(and_, hashes, repeat(_TOP)), places)))


class ColdTail:
    """Pending messages past the hot window, oldest first. Rows are numbered for ever
    (absolute indexes); the columns hold rows [start, start + len(seqs))."""

    __slots__ = (
        "_ids",
        "_ends",
        "_base",
        "_seqs",
        "_accepted",
        "_partitions",
        "_offsets",
        "_hashes",
        "_start",
        "_head",
        "_dead",
        "_segments",
        "_pins",
        "count",
    )

    def __init__(self) -> None:
        self._clear(0)

    def _clear(self, start: int) -> None:
        self._ids = bytearray()  # every row's ID, UTF-8, end to end
        self._ends = array("q")  # where each row's ID ends: absolute, _base being where _ids begins
        self._base = 0
        self._seqs = array("q")
        self._accepted = array("q")
        self._partitions = array("i")
        self._offsets = array("q")
        self._hashes = array("q")  # for a hash shared by two IDs (the index keeps the first)
        self._start = start  # absolute index of the columns' first row
        self._head = start  # absolute index of the first row not gone from the front
        self._dead: set[int] = set()  # rows past the head gone out of order
        self._segments: list[_Segment] = []
        self._pins = 0  # snapshots reading the columns: no cut while any does
        self.count = 0  # rows still here

    def __len__(self) -> int:
        return self.count

    @property
    def head_seq(self) -> int:
        """The sequence number of the oldest row (the tail is not empty)."""
        return self._seqs[self._head - self._start]

    @property
    def last_seq(self) -> int:
        return self._seqs[-1] if self._seqs else -1

    def append(self, mid: str, seq: int, accepted_at: int, at: tuple[int, int]) -> None:
        """A message visible on acceptance (its visibleAt is its acceptedAt)."""
        h = hash(mid)
        self._ids += mid.encode()
        self._ends.append(self._base + len(self._ids))
        self._seqs.append(seq)
        self._accepted.append(accepted_at)
        self._partitions.append(at[0])
        self._offsets.append(at[1])
        self._hashes.append(h)
        row = self._start + len(self._seqs) - 1
        if not self._segments or self._segments[-1].open is None:
            self._segments.append(_Segment(row))
        segment = self._segments[-1]
        segment.add(h, row)
        if segment.full():
            segment.seal()
            self._merge()
        self.count += 1

    def extend(
        self, mids: Sequence[str], seqs: Sequence[int], accepted: Sequence[int], partition: int, offsets: Sequence[int]
    ) -> None:
        """Rows oldest first, each as `append` adds it, in bulk (a snapshot's restore): the
        columns grow by C loops, the index a segment at a time."""
        n = len(mids)
        if not n:
            return
        raw = list(map(str.encode, mids))
        hashes = list(map(hash, mids))
        self._ends.extend(islice(accumulate(map(len, raw), initial=self._base + len(self._ids)), 1, None))
        self._ids += b"".join(raw)
        self._seqs.extend(seqs)
        self._accepted.extend(accepted)
        self._partitions.extend(repeat(partition, n))
        self._offsets.extend(offsets)
        self._hashes.extend(hashes)
        first = self._start + len(self._seqs) - n
        i = 0
        while i < n:
            if not self._segments or self._segments[-1].open is None:
                if n - i >= _SEGMENT:  # a whole segment's rows: sealed at once, no dict between
                    self._segments.append(_Segment.sealed(first + i, hashes[i : i + _SEGMENT]))
                    self._merge()
                    i += _SEGMENT
                    continue
                self._segments.append(_Segment(first + i))
            segment = self._segments[-1]
            take = min(_SEGMENT - segment.n, n - i)
            segment.extend(hashes[i : i + take], first + i)
            if segment.full():
                segment.seal()
                self._merge()
            i += take
        self.count += n

    def find(self, mid: str) -> int | None:
        """The absolute index of the row holding `mid`, if one is here."""
        if not self.count:
            return None
        # Newest first: an ID is appended again only once its earlier row is gone, so the
        # latest row with its hash decides.
        h, raw = hash(mid), mid.encode()
        # Batches take messages in acceptance order, so a delivery folded from the log names the
        # head row nearly always: one compare instead of a search through every segment.
        head = self._head - self._start
        if self._hashes[head] == h and self._id_at(head) == raw:
            return self._head
        for segment in reversed(self._segments):
            for row in reversed(segment.rows(h)):
                if row < self._head or self._hashes[row - self._start] != h:
                    continue  # gone from the front, or another hash with the same top
                if self._id_at(row - self._start) != raw:
                    return self._scan(h, raw)  # another ID has its hash (about never): ask every row
                return None if row in self._dead else row
        return None

    def _merge(self) -> None:
        sealed = [s for s in self._segments if s.open is None]
        while len(sealed) >= 2 and sealed[-1].n == sealed[-2].n and sealed[-1].n * 2 <= _MERGED:
            later = sealed.pop()
            sealed[-1].merge(later)
            self._segments.remove(later)

    def _scan(self, h: int, raw: bytes) -> int | None:
        """Every live row for the ID: only when two IDs share a 64-bit hash (about never)."""
        for pos in range(self._head - self._start, len(self._seqs)):
            if self._hashes[pos] == h and self._start + pos not in self._dead and self._id_at(pos) == raw:
                return self._start + pos
        return None

    def __contains__(self, mid: str) -> bool:
        return self.find(mid) is not None

    def take(self, row: int) -> Row:
        """Row `row` (from `find`), gone from here."""
        out = self._row(row - self._start)
        self.count -= 1
        if row == self._head:
            self._advance()
        else:
            self._dead.add(row)
        return out

    def take_id(self, mid: str) -> Row | None:
        """The row holding `mid`, gone from here; None if none does."""
        row = self.find(mid) if self.count else None
        return None if row is None else self.take(row)

    def pop(self) -> Row | None:
        """The oldest row, gone from here; None when empty."""
        if not self.count:
            return None
        return self.take(self._head)

    def rows(self) -> Iterator[Row]:
        """The rows, oldest first (for retention); do not change the tail while iterating."""
        for row in range(self._head, self._start + len(self._seqs)):
            if row not in self._dead:
                yield self._row(row - self._start)

    def frozen(self) -> "Frozen":
        """The rows as they are now, to read later (a snapshot's writer): later changes to the
        tail do not show, and the columns are not cut until it is read through or dropped."""
        return Frozen(self)

    # ---- inside --------------------------------------------------------------------------------

    def _id_at(self, pos: int) -> bytes:
        lo = (self._ends[pos - 1] if pos else self._base) - self._base
        return bytes(self._ids[lo : self._ends[pos] - self._base])

    def _row(self, pos: int) -> Row:
        accepted = self._accepted[pos]
        return (
            self._id_at(pos).decode(),
            self._seqs[pos],
            accepted,
            accepted,
            (self._partitions[pos], self._offsets[pos]),
        )

    def _advance(self) -> None:
        self._head += 1
        while self._head in self._dead:
            self._dead.discard(self._head)
            self._head += 1
        self._tidy()

    def _tidy(self) -> None:
        if self._pins:
            return
        if not self.count:
            self._clear(self._head)  # numbering goes on: a row index is never used twice
        elif self._head - self._start >= _COMPACT_AT:
            self._cut()

    def _cut(self) -> None:
        """Drop the rows gone from the front from every column (memmoves, no Python loop)."""
        n = self._head - self._start
        base = self._ends[n - 1]
        del self._ids[: base - self._base]
        self._base = base
        for column in (self._ends, self._seqs, self._accepted, self._partitions, self._offsets, self._hashes):
            del column[:n]
        self._start = self._head
        self._segments = [s for s in self._segments if s.hi > self._head or s.open is not None]


class Frozen:
    """ColdTail.frozen: the rows of a moment, read once, lazily."""

    def __init__(self, tail: ColdTail) -> None:
        self.tail: ColdTail | None = tail
        self.head, self.end, self.dead = tail._head, tail._start + len(tail._seqs), frozenset(tail._dead)
        tail._pins += 1

    def __iter__(self) -> Iterator[Row]:
        tail = self.tail
        if tail is None:
            return
        try:
            for row in range(self.head, self.end):
                if row not in self.dead:
                    yield tail._row(row - tail._start)
        finally:
            self.release()

    def release(self) -> None:
        if self.tail is not None:
            self.tail._pins -= 1
            self.tail._tidy()  # what the reader kept from being cut
            self.tail = None

    def __del__(self) -> None:
        self.release()
