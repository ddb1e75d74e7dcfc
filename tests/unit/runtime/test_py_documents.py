"""DOC-1..6 for Python worker values (sumi.runtime.documents)."""

from __future__ import annotations

from typing import Any

import pytest

from sumi.runtime.documents import MAX_DOCUMENT_BYTES, DocumentError, canonical_document

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
        ({"i": 2**60}, "invalid_params"),
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
