"""The JavaScript canonical form (js/document.mjs, in a real node) and the Python one
(sumi.core.canonical) agree byte for byte: one canonical form for every part of the Host."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sumi.core.canonical import canonical, document
from tests.unit.runtime.runtime_testkit import JS_DIR

# Values cross as JSON text: Python writes each double's shortest round-trip digits and
# JSON.parse reads them back to the same double (both round correctly), -0 included.
_RUNNER = """
import { checkDocument } from %s;
let input = '';
for await (const chunk of process.stdin) input += chunk;
const out = JSON.parse(input).map((doc) => {
  const r = checkDocument(doc);
  return r.ok ? r.canonical : `${r.code}: ${r.message}`;
});
process.stdout.write(JSON.stringify(out));
"""

EDGES = [
    0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1e308, 1.7976931348623157e308,
    2.0**53, 2.0**53 + 2, 2.0**60, 1e21, 1e20, 9.999999999999999e20, 1e-6, 1e-7, 0.1, 1 / 3, 123456789.125,
]  # fmt: skip


def js_canonical(docs: list[dict[str, Any]]) -> list[str]:
    done = subprocess.run(
        ["node", "--input-type=module", "-e", _RUNNER % json.dumps((JS_DIR / "document.mjs").as_uri())],
        input=json.dumps(docs),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out: list[str] = json.loads(done.stdout)
    return out


def test_edge_numbers_agree() -> None:  # DOC-2: every finite double, the ends of the range and zero's sign
    docs = [{"n": x} for x in EDGES] + [{"n": -x} for x in EDGES]
    assert js_canonical(docs) == [document(d) for d in docs]
    assert document({"n": -0.0}) == '{"n":0}' and document({"n": 5e-324}) == '{"n":5e-324}'


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=500))
def test_every_double_agrees(numbers: list[float]) -> None:  # DOC-2: RFC 8785 Number serialization
    docs = [{"n": x} for x in numbers]
    assert js_canonical(docs) == [document(d) for d in docs]


_scalars = (
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**53), 2**53)
    | st.text(max_size=8)
)
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), _values, max_size=6), min_size=1, max_size=50))
def test_documents_agree(docs: list[dict[str, Any]]) -> None:  # DOC-1, DOC-2, DOC-3: key order, strings, nesting
    assert js_canonical(docs) == [document(d) for d in docs]


def test_integers_beyond_2_53_are_doubles() -> None:  # DOC-2: a Python int is read as the nearest double
    ints = [2**53 + 1, 2**60 + 1, -(2**64) - 1, 10**300, 3**200]
    expected = js_canonical([{"n": float(i)} for i in ints])
    assert [document({"n": i}) for i in ints] == expected
    assert canonical(2**60) == "1152921504606847000"
