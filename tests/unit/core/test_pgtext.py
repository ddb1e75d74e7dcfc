"""The read side's str encoding (sumi.wire.pgtext): reversible, free of U+0000, ordered."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sumi.wire.pgtext import decode, encode

# Mostly the two characters the encoding touches, so their neighbours meet often.
TEXT = st.text(st.sampled_from("\x00\x01\x02a") | st.characters(codec="utf-8"))


@given(TEXT)
def test_round_trip_without_nul(value: str) -> None:  # DOC-2, WF-19: any Unicode string fits text
    stored = encode(value)
    assert "\x00" not in stored and decode(stored) == value


@given(TEXT, TEXT)
def test_order_and_equality_are_kept(a: str, b: str) -> None:  # WF-19: "C" (byte) order pages stably
    ea, eb = encode(a).encode(), encode(b).encode()
    assert (ea < eb) == (a < b) and (ea == eb) == (a == b)


def test_most_values_are_their_own_text() -> None:
    assert encode("order-1 \u2028\U0001f600") == "order-1 \u2028\U0001f600"
    assert encode("\x00\x01") == "\x01\x01\x01\x02"


@pytest.mark.parametrize("stored", ["\x01", "a\x01b", "\x01\x03"])
def test_a_bare_escape_is_no_encoded_text(stored: str) -> None:  # a writer that bypassed encode is loud
    with pytest.raises(ValueError):
        decode(stored)
