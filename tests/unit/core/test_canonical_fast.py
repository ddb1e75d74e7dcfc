"""The fast path of the canonical form answers exactly what the walk answers (DOC-1, DOC-2,
DOC-3, DOC-6): the same text, or the same refusal."""

import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sumi.core.canonical import MAX_DEPTH, DocumentError, canonical, document, loads, parsed_canonical, parsed_document

# Keys and strings over every code point class the encoders treat apart: controls, quotes and
# backslashes, the BMP above U+E000 (UTF-16 order differs there), non-BMP, lone surrogates.
TEXT = st.text(
    st.characters(codec=None, categories=None)
    | st.sampled_from(['"', "\\", "\x00", "\x1f", "\u2028", "\ue000", "\uffff", "\U0001f600", "\ud800"]),
    max_size=6,
)
NUMBERS = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers()
    | st.integers(2**52, 2**70)
    | st.sampled_from([1.0, -0.0, 1e16, 1e20, 1e21, 1e-5, 1e-7, 5e-324, 1e308, 10**400, 2**53 + 1])
)
VALUES = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=30,
)


def _answer(fn: Any, value: Any) -> tuple[str, str]:
    try:
        return ("ok", fn(value))
    except DocumentError as exc:
        return ("refused", exc.code)


def _nested(depth: int) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for _ in range(depth - 1):
        d = {"a": d}
    return d


@settings(max_examples=600)
@given(st.dictionaries(TEXT, VALUES, max_size=6))
@example({"n": [1.0, 1e17, 1e-5, 2**60 + 1, -0.0]})
@example({"\U0001f600": 1, "\ue000": 2})
@example({'\ue000\\"': 1, '\U0001f600"': 2})
@example({"s": "\ud800"})
@example(_nested(MAX_DEPTH))
@example(_nested(MAX_DEPTH + 1))
def test_the_fast_path_answers_what_the_walk_answers(value: dict[str, Any]) -> None:
    # DOC-2, DOC-3: as the Host sees a value, parsed from JSON text
    try:
        parsed = loads(json.dumps(value))
    except ValueError:
        return  # not JSON text at all (e.g. an integer beyond the double range)
    assert _answer(parsed_document, parsed) == _answer(document, parsed)


def test_the_size_bound_is_the_same() -> None:
    # DOC-1, DOC-6
    for n in (1024 * 1024 - 8, 1024 * 1024 - 7, 1024 * 1024):
        value = {"s": "x" * n}
        assert _answer(parsed_document, value) == _answer(document, value)


@settings(max_examples=300)
@given(VALUES)
def test_the_fast_canonical_answers_what_the_walk_answers(value: Any) -> None:
    # DOC-2: command payloads, step results and decisions take the fast path
    try:
        parsed = loads(json.dumps(value))
    except ValueError:
        return
    assert _answer(parsed_canonical, parsed) == _answer(canonical, parsed)
