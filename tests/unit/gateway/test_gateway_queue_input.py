"""The queue send body and message IDs (host-api.md §4, forms.md AtLeastOnceQueue)."""

import base64

import pytest

from sumi.core.problems import Problem
from sumi.gateway._queue_input import MAX_BODY, Outgoing, message_ids, parse_messages


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def code_of(body: object) -> str:
    with pytest.raises(Problem) as caught:
        parse_messages(body)  # type: ignore[arg-type]
    return caught.value.code


def test_messages_are_decoded_in_array_order() -> None:  # QC-52
    body = {"messages": [{"body": b64(b"one")}, {"body": b64(b""), "delaySeconds": 43200}]}
    assert parse_messages(body) == [Outgoing(b"one", 0), Outgoing(b"", 43200)]


def test_largest_body_is_accepted_and_one_more_byte_is_413() -> None:  # QC-52
    assert parse_messages({"messages": [{"body": b64(b"x" * MAX_BODY)}]})[0].body == b"x" * MAX_BODY
    assert code_of({"messages": [{"body": b64(b"x" * (MAX_BODY + 1))}]}) == "message_too_large"


@pytest.mark.parametrize(
    "body",
    [
        {"messages": []},
        {"messages": [{"body": "AA=="}] * 101},
        {"messages": "x"},
        {"messages": [{"body": "AA==", "extra": 1}]},
        {"messages": [{}]},
        {"messages": ["AA=="]},
        {"messages": [{"body": "AA"}]},  # unpadded
        {"messages": [{"body": "-_8="}]},  # URL-safe alphabet
        {"messages": [{"body": "A A="}]},
        {"messages": [{"body": 1}]},
        {"messages": [{"body": "AA==", "delaySeconds": -1}]},
        {"messages": [{"body": "AA==", "delaySeconds": 43201}]},
        {"messages": [{"body": "AA==", "delaySeconds": 1.5}]},
        {"messages": [{"body": "AA==", "delaySeconds": True}]},
        {"messages": [{"body": "AA=="}], "extra": True},
    ],
)
def test_malformed_sends_are_invalid_request(body: object) -> None:  # QC-52, QC-53
    assert code_of(body) == "invalid_request"


def test_ids_without_a_key_are_fresh() -> None:
    first, second = message_ids("res_q", "alice", None, 2), message_ids("res_q", "alice", None, 2)
    assert len(set(first + second)) == 4
    assert all(i.startswith("msg_") and 1 <= len(i) <= 256 for i in first)  # QC-22


def test_ids_with_a_key_are_re_derived_by_a_replay() -> None:  # QC-46 on the data plane
    ids = message_ids("res_q", "alice", "k1", 3)
    assert ids == message_ids("res_q", "alice", "k1", 3)
    assert len(set(ids)) == 3
    assert all(len(i) == len("msg_") + 26 for i in ids)


def test_key_is_scoped_to_queue_and_principal() -> None:
    ids = message_ids("res_q", "alice", "k1", 1)
    assert ids != message_ids("res_r", "alice", "k1", 1)
    assert ids != message_ids("res_q", "bob", "k1", 1)
    assert ids != message_ids("res_q", "alice", "k2", 1)
    # No collision by concatenation: ("ab", "c") and ("a", "bc") differ.
    assert message_ids("res_q", "ab", "c", 1) != message_ids("res_q", "a", "bc", 1)
