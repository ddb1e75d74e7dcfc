"""Pure request rules of the gateway: bodies, Idempotency-Key, fingerprints, cursors."""

import hashlib

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from sumi.core.problems import Problem
from sumi.gateway._json import check_object, fingerprint, idempotency_key, parse_json
from sumi.gateway._query import decode_cursor, encode_cursor, parse_int
from sumi.gateway._resources import check_body
from sumi.gateway._spaces import check_name


def code_of(fn, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(Problem) as caught:
        fn(*args)
    return caught.value.code


# ---- bodies: strict JSON objects (host-api.md §2 "Unknown top-level request keys are rejected")


@pytest.mark.parametrize(
    "raw", [b"", b"{", b"[1]x", b'{"a": NaN}', b'{"a": Infinity}', b'{"a": 1, "a": 2}', b"\xff\xfe"]
)
def test_malformed_json_is_invalid_request(raw: bytes) -> None:
    assert code_of(parse_json, raw) == "invalid_request"


@pytest.mark.parametrize("body", [[], "x", 1, None, True])
def test_top_level_must_be_an_object(body: object) -> None:
    assert code_of(check_object, body, {"name"}) == "invalid_request"


def test_unknown_and_missing_keys_are_invalid_request() -> None:  # QC-53 at the top level
    assert code_of(check_object, {"name": "a", "extra": 1}, {"name"}) == "invalid_request"
    assert code_of(check_object, {}, {"name"}) == "invalid_request"
    assert check_object({"name": "a", "opt": 1}, {"name"}, {"opt"}) == {"name": "a", "opt": 1}


@pytest.mark.parametrize(
    "body",
    [
        {"name": 1, "form": "f", "spec": {}},
        {"name": "a", "form": None, "spec": {}},
        {"name": "a", "form": "f", "spec": []},
        {"name": "a", "form": "f", "spec": {}, "privateInputs": "x"},
    ],
)
def test_wrong_top_level_types_are_invalid_request(body: dict) -> None:
    assert code_of(check_body, body) == "invalid_request"


# ---- Idempotency-Key (host-api.md §2)


def test_missing_key_is_428_only_where_required() -> None:
    assert code_of(idempotency_key, None, True) == "idempotency_key_required"
    assert idempotency_key(None, False) is None


@pytest.mark.parametrize("key", ["", " ", "a b", "x" * 256, "é", "tab\t", "\x7f"])
def test_malformed_key_is_invalid_request(key: str) -> None:
    assert code_of(idempotency_key, key, True) == "invalid_request"


@pytest.mark.parametrize("key", ["a", "x" * 255, "!~", "order-42/retry:1"])
def test_visible_ascii_keys_are_accepted(key: str) -> None:
    assert idempotency_key(key, True) == key


# ---- fingerprints bind a key to method, path and body (QC-46)


def test_fingerprint_is_sha256_of_method_path_and_canonical_body() -> None:  # QC-46
    body = {"spec": {"retentionSeconds": 60}, "name": "q"}
    expected = hashlib.sha256(b"POST\n/v2/spaces/s/resources\n" + rfc8785.dumps(body)).hexdigest()
    assert fingerprint("POST", "/v2/spaces/s/resources", body) == expected


def test_fingerprint_ignores_key_order_and_whitespace_but_not_values() -> None:  # QC-46
    a = parse_json(b'{"name": "q", "spec": {"b": 1, "a": 2}}')
    b = parse_json(b'{"spec":{"a":2,"b":1},"name":"q"}')
    assert fingerprint("PUT", "/p", a) == fingerprint("PUT", "/p", b)
    assert fingerprint("PUT", "/p", a) != fingerprint("PUT", "/p", {**a, "name": "r"})
    assert fingerprint("PUT", "/p", a) != fingerprint("POST", "/p", a)
    assert fingerprint("DELETE", "/p", None) != fingerprint("DELETE", "/q", None)


# ---- paging

_UID_PART = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=0)


@given(st.tuples(_UID_PART, _UID_PART).map(lambda parts: f"{parts[0]}_{parts[1]}"))
def test_cursor_round_trips(uid: str) -> None:
    assert decode_cursor(encode_cursor(uid)) == uid


@pytest.mark.parametrize("cursor", ["!!!", "bm91bmRlcnNjb3Jl", "/w"])
def test_foreign_cursor_is_invalid_request(cursor: str) -> None:
    assert code_of(decode_cursor, cursor) == "invalid_request"


@pytest.mark.parametrize("raw", ["0", "101", "-1", "1.5", "x", "", "١٠"])
def test_limit_out_of_range_is_invalid_request(raw: str) -> None:
    assert code_of(parse_int, "limit", raw, 1, 100) == "invalid_request"


@pytest.mark.parametrize("name", ["demo\n", "Demo", "-demo", "d" * 64, ""])
def test_space_and_principal_names_match_the_whole_pattern(name: str) -> None:
    # host-api.md §1: ^[a-z0-9][a-z0-9-]{0,62}$ over the whole name ("demo\n" once passed).
    assert code_of(check_name, name, "name") == "invalid_request"
    assert check_name("demo-1", "name") == "demo-1"
