"""DOC-1..6 and the canonical form (sumi.core.canonical): Python worker values, the Host's own."""

from __future__ import annotations

from typing import Any

import pytest

from sumi.core.canonical import MAX_DEPTH, MAX_DOCUMENT_BYTES, DocumentError, canonical, json_int, loads
from sumi.core.canonical import document as canonical_document

shared = {"k": [1, 2]}


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        ({}, "{}"),
        ({"b": 1, "a": [True, None, 1.5, "é"]}, '{"a":[true,null,1.5,"é"],"b":1}'),
        ({"x": shared, "y": shared}, '{"x":{"k":[1,2]},"y":{"k":[1,2]}}'),  # DOC-3: shared, acyclic
        ({"n": 1.0, "m": -0.0, "e": 1e21}, '{"e":1e+21,"m":0,"n":1}'),
        ({str(i): i for i in range(1024)}, None),  # DOC-1: the root limit is reached, not passed
        ({"deep": {str(i): i for i in range(2000)}}, None),  # the limit is on the root only
        # DOC-2: numbers are doubles; an int is read as the nearest one (docs/decisions.md)
        ({"n": 2**53, "m": -(2**53)}, '{"m":-9007199254740992,"n":9007199254740992}'),
        ({"n": 2**53 + 1}, '{"n":9007199254740992}'),
        ({"n": 2**60, "f": float(2**60)}, '{"f":1152921504606847000,"n":1152921504606847000}'),
        (
            {"a": 1e308, "b": 5e-324, "c": -0.0, "d": 2.2250738585072014e-308},
            '{"a":1e+308,"b":5e-324,"c":0,"d":2.2250738585072014e-308}',
        ),
        ({"n": 10**308}, '{"n":1e+308}'),
    ],
)
def test_documents(value: Any, canonical: str | None) -> None:  # DOC-1, DOC-2, DOC-3
    text = canonical_document(value)
    if canonical is not None:
        assert text == canonical


cyclic: dict[str, Any] = {}
cyclic["self"] = cyclic


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (None, "invalid_params"),  # DOC-1: null, arrays and scalars are not documents
        ([1], "invalid_params"),
        ("text", "invalid_params"),
        ({"t": (1, 2)}, "invalid_params"),  # DOC-3
        ({"s": {1, 2}}, "invalid_params"),
        ({"b": b"x"}, "invalid_params"),
        ({1: "int key"}, "invalid_params"),
        ({"f": float("nan")}, "invalid_params"),
        ({"f": float("inf")}, "invalid_params"),
        ({"s": "\ud800"}, "invalid_params"),
        ({"\udc00": 1}, "invalid_params"),
        ({"i": 10**400}, "invalid_params"),  # DOC-2: beyond the doubles, like 1e400
        ({"i": -(10**309)}, "invalid_params"),
        ({"o": object()}, "invalid_params"),
        (cyclic, "invalid_params"),
        ({str(i): i for i in range(1025)}, "document_too_large"),
        ({"s": "x" * MAX_DOCUMENT_BYTES}, "document_too_large"),
    ],
)
def test_non_documents(value: Any, code: str) -> None:  # DOC-1, DOC-2, DOC-3
    with pytest.raises(DocumentError) as info:
        canonical_document(value)
    assert info.value.code == code


def test_the_size_limit_is_on_canonical_utf8_bytes() -> None:  # DOC-1
    overhead = len('{"s":""}')
    assert canonical_document({"s": "x" * (MAX_DOCUMENT_BYTES - overhead)})
    with pytest.raises(DocumentError):
        canonical_document({"s": "é" * ((MAX_DOCUMENT_BYTES - overhead) // 2 + 1)})


def _nested(depth: int) -> dict[str, Any]:
    """Objects and arrays in turn, exactly `depth` of them, the root (an object) counted."""
    doc: Any = {}
    for i in range(depth - 1):
        doc = {"a": doc} if i % 2 == depth % 2 else [doc]
    assert isinstance(doc, dict)
    return doc


def _depth(value: Any) -> int:
    if isinstance(value, dict | list):
        return 1 + max(map(_depth, value.values() if isinstance(value, dict) else value), default=0)
    return 0


def test_depth_bound() -> None:  # DOC-1, DOC-3: one depth bound, MAX_DEPTH, the root counted
    assert _depth(_nested(MAX_DEPTH)) == MAX_DEPTH
    canonical_document(_nested(MAX_DEPTH))
    with pytest.raises(DocumentError) as info:
        canonical_document(_nested(MAX_DEPTH + 1))
    assert info.value.code == "invalid_params" and "nested deeper than 128" in str(info.value)
    shared = _nested(MAX_DEPTH - 1)
    canonical_document({"s": shared})
    with pytest.raises(DocumentError):  # a shared sub-object is judged at each depth it is used at
        canonical_document({"ok": shared, "deeper": [shared]})


def test_deep_and_cyclic_values_never_recurse() -> None:  # DOC-3: the Host's own walk is iterative
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    assert canonical(deep).startswith("[[[")
    with pytest.raises(DocumentError) as info:
        canonical_document({"d": deep})
    assert info.value.code == "invalid_params"


def test_size_is_refused_early() -> None:  # DOC-1: the walk stops at the bound
    big = {"a": ["x" * 1000] * 10_000_000}  # 10 GB as canonical JSON: never built
    with pytest.raises(DocumentError) as info:
        canonical_document(big)
    assert info.value.code == "document_too_large"


@pytest.mark.parametrize(
    ("literal", "value"),
    [("9007199254740993", 2.0**53), ("-9007199254740993", -(2.0**53)), ("1" + "0" * 5000, float("inf")), ("12", 12)],
)
def test_int_literals_are_read_as_javascript_reads_them(literal: str, value: float) -> None:  # DOC-2
    assert json_int(literal) == value and type(json_int(literal)) is type(value)
    assert loads(f"[{literal}]") == [value]
