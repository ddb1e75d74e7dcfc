"""checkDocument (js/document.mjs) against DOC-1..6, run in a real node."""

from __future__ import annotations

import json

import rfc8785

from tests.unit.runtime.runtime_testkit import check_documents

MIB = 1_048_576


def codes(*cases: str) -> list[str | None]:
    return [r["code"] for r in check_documents(*cases)]


def test_root_must_be_plain_object() -> None:  # DOC-1
    assert (
        codes(
            "return {a: 1}",
            "return Object.create(null)",
            "return null",
            "return [1]",
            "return 3",
            "return 'x'",
            "return new Date()",
            "return new (class A {})()",
            "return undefined",
        )
        == [None, None] + ["invalid_params"] * 7
    )


def test_inside_values() -> None:  # DOC-2, DOC-3
    ok = ["return {a: null, b: true, c: 1.5, d: 'ü😀', e: {f: [1, [2]]}, g: Object.create(null)}"]
    bad = [
        "return {a: 1n}",
        "return {a: Symbol('s')}",
        "return {[Symbol('k')]: 1}",
        "return {a() {}}",
        "return {a: NaN}",
        "return {a: Infinity}",
        "return {a: undefined}",
        "return {a: [1, undefined]}",
        "return {a: [1,,3]}",
        "return {a: Object.assign([1], {x: 2})}",
        "return {a: new Map()}",
        "return {a: new Uint8Array(1)}",
        "return {a: '\\ud800'}",
        "const o = {}; o.self = o; return o",
        "const a = []; a.push({a}); return {a}",
        "const o = {}; Object.defineProperty(o, 'h', {value: 1, enumerable: false}); return o",
    ]
    assert codes(*ok, *bad) == [None] + ["invalid_params"] * len(bad)


def test_shared_acyclic_sub_objects_accepted() -> None:  # DOC-3
    shared = "const s = {x: [1, 2]}; let d = {a: s, b: [s, s]};"
    # 40 levels of doubling: 2**40 leaves if expanded, linear with memoization.
    dag = "let n = {v: 1}; for (let i = 0; i < 40; i++) n = {l: n, r: n}; return {n};"
    first, second = check_documents(shared + " return d", dag)
    assert first["ok"] and first["canonical"] == '{"a":{"x":[1,2]},"b":[{"x":[1,2]},{"x":[1,2]}]}'
    assert second["code"] == "document_too_large"


def test_getters_and_tojson_never_run() -> None:  # DOC-4
    getter = "return {get a() { globalThis.sideEffects++; return 1; }}"
    nested_getter = "return {a: [{get b() { globalThis.sideEffects++; return 1; }}]}"
    to_json = "return {a: 1, toJSON() { globalThis.sideEffects++; return {}; }}"
    data_to_json = "return {b: {c: 1, toJSON: 2}}"
    r = check_documents(getter, nested_getter, to_json, data_to_json)
    assert [x["code"] for x in r] == ["invalid_params", "invalid_params", "invalid_params", None]
    assert [x["sideEffects"] for x in r] == [0, 0, 0, 0]
    assert r[3]["canonical"] == '{"b":{"c":1,"toJSON":2}}'


def test_root_property_limit() -> None:  # DOC-1, DOC-6
    build = "const o = {}; for (let i = 0; i < %d; i++) o['k' + i] = i; return o"
    assert codes(build % 1024, build % 1025) == [None, "document_too_large"]


def test_size_limit_edges() -> None:  # DOC-1, DOC-6
    # '{"a":"' + s + '"}' is 8 bytes of framing around s.
    exact = f"return {{a: 'x'.repeat({MIB - 8})}}"
    over = f"return {{a: 'x'.repeat({MIB - 7})}}"
    multibyte = f"return {{a: 'é'.repeat({(MIB - 8) // 2})}}"  # 2 bytes each in UTF-8
    escaped = f"return {{a: '\\n'.repeat({(MIB - 8) // 2 + 1})}}"  # 2 bytes each once escaped
    r = check_documents(exact, over, multibyte, escaped)
    assert (r[0]["ok"], r[0]["size"]) == (True, MIB)
    assert r[1]["code"] == "document_too_large"
    assert (r[2]["ok"], r[2]["size"]) == (True, MIB)
    assert r[3]["code"] == "document_too_large"


def test_canonical_form_matches_rfc8785() -> None:  # DOC-1
    sources = [
        "return {b: 1, a: [1e21, 1e-7, -0, 0.1, 123456789012], '\\u20ac': 'x', '\\ud83d\\ude00': 1, 'A': 2,"
        " '\\x7f': 3}",
        "return {s: '\\u0001\\b\\t\\n\\f\\r\"\\\\/é😀', n: [5e-324, 1.7976931348623157e308, 333333333.3333333]}",
    ]
    for r in check_documents(*sources):
        parsed = json.loads(r["canonical"])
        assert rfc8785.dumps(parsed).decode("utf-8") == r["canonical"]
        assert r["size"] == len(r["canonical"].encode("utf-8"))


def test_proxies_are_refused() -> None:  # DOC-1, DOC-4
    # A Proxy root could report 1 key when counted and 5,000 when serialised.
    proxy_root = (
        "let n = 0; return new Proxy({}, { ownKeys() { n++; globalThis.sideEffects++;"
        " return n === 1 ? ['a'] : Array.from({length: 5000}, (_, i) => 'k' + i); } })"
    )
    nested = "return {a: new Proxy({}, {})}"
    r = check_documents(proxy_root, nested)
    assert [x["code"] for x in r] == ["invalid_params", "invalid_params"]
    assert r[0]["sideEffects"] == 0  # refused before any trap ran


def test_patched_intrinsics_do_not_fool_the_checks() -> None:  # DOC-1, DOC-6
    patch = (
        "JSON.stringify = () => '1'; String.prototype.charCodeAt = () => 65; Array.prototype.sort = function () {"
        " return this; }; Array.prototype.join = () => ''; RegExp.prototype.test = () => false;"
        " Object.defineProperty(Array.prototype, '0', { set() {}, configurable: true });"
        " Object.defineProperty(Object.prototype, 'code', { set() {}, configurable: true });"
    )
    big = f"{patch} return {{a: 'é'.repeat({MIB // 2})}}"  # 2 bytes each: over the limit
    ordered = f"{patch} return {{b: 1, a: '\\ud800'}}"
    plain = f"{patch} return {{b: 1, a: [2, 'x']}}"
    r = check_documents(big, ordered, plain)
    # each case patches the realm again; the checker captured its intrinsics when it loaded
    assert r[0]["code"] == "document_too_large"
    assert r[1]["code"] == "invalid_params"  # the lone surrogate is still seen
    assert r[2]["canonical"] == '{"a":[2,"x"],"b":1}'


def _nested_js(depth: int) -> str:
    """JS building objects and arrays in turn, exactly `depth` of them, the root (an object) counted."""
    return f"let d = {{}}; for (let i = 0; i < {depth - 1}; i++) d = i % 2 === {depth % 2} ? {{a: d}} : [d]; return d"


def test_depth_bound() -> None:  # DOC-1, DOC-3: MAX_DEPTH (128), the same bound as sumi.core.canonical
    at_bound, over, far, shared_ok, shared_over = check_documents(
        _nested_js(128),
        _nested_js(129),
        _nested_js(1500),
        "const s = (() => { " + _nested_js(127) + " })(); return {s}",
        "const s = (() => { " + _nested_js(127) + " })(); return {s, deeper: [s]}",
    )
    assert at_bound["ok"] and shared_ok["ok"]
    assert [over["code"], far["code"], shared_over["code"]] == ["invalid_params"] * 3


def test_numbers_are_doubles() -> None:  # DOC-2: 2**53 and beyond are documents, -0 is 0
    (r,) = check_documents("return {a: 2**53, b: 2**60, c: -0, d: 5e-324, e: 1e308}")
    assert r["canonical"] == '{"a":9007199254740992,"b":1152921504606847000,"c":0,"d":5e-324,"e":1e+308}'
