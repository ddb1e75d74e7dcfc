"""The typed workflow commands: what the gateway and bindings submit is what the engine decodes."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sumi.core.problems import Problem
from sumi.workflow import commands as c

names = st.text(min_size=1, max_size=256).filter(lambda s: not any(0xD800 <= ord(ch) <= 0xDFFF for ch in s))
docs = st.just(c.UNSET) | st.dictionaries(
    st.text(max_size=8), st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8), max_size=5
)


@given(uid=names, iid=names, params=docs)
def test_create_round_trips(uid: str, iid: str, params: object) -> None:  # WF-18, WF-19
    cmd = c.CreateInstance(uid, iid, params)
    rec = c.submitted(cmd, command_id="01j", space="demo", principal="alice", now=1)
    assert c.decode(rec.kind, rec.payload) == cmd
    assert c.key_of(cmd) == f"{uid}/{iid}"


@given(iid=names, type_=names, payload=docs)
def test_event_round_trips(iid: str, type_: str, payload: object) -> None:  # WF-23
    cmd = c.SendEvent("wf_1", iid, type_, payload)
    rec = c.submitted(cmd, command_id="01j", space="demo", principal="alice", now=1)
    assert c.decode(rec.kind, rec.payload) == cmd


def test_terminate_round_trips() -> None:  # WF-26
    cmd = c.TerminateInstance("wf_1", "a")
    assert c.decode(cmd.kind, c.payload(cmd)) == cmd


def test_an_omitted_id_is_issued_by_the_submitter() -> None:  # WF-19
    a, b = c.CreateInstance.new("wf_1"), c.CreateInstance.new("wf_1")
    assert a.issued and a.instance_id != b.instance_id
    assert c.decode(a.kind, c.payload(a)) == a


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        ({"workflowUid": "wf", "id": ""}, "invalid_request"),  # WF-19: 1..256
        ({"workflowUid": "wf", "id": "x" * 257}, "invalid_request"),
        ({"workflowUid": "wf", "id": "\ud800"}, "invalid_request"),  # not a Unicode scalar value
        ({"workflowUid": "wf", "id": "a", "extra": 1}, "invalid_request"),  # DOC-6: unknown keys
        ({"workflowUid": "", "id": "a"}, "invalid_request"),
        ({"workflowUid": "wf", "id": 1}, "invalid_request"),  # exact JSON types
        ({"workflowUid": "wf", "id": "a", "issued": 1}, "invalid_request"),
        ({"id": "a"}, "invalid_request"),  # required
        ({"workflowUid": "wf", "id": "a", "params": None}, "invalid_params"),  # DOC-5: null is not absent
        ({"workflowUid": "wf", "id": "a", "params": [1]}, "invalid_params"),  # DOC-1
        ({"workflowUid": "wf", "id": "a", "params": {str(i): i for i in range(1025)}}, "document_too_large"),
        ({"workflowUid": "wf", "id": "a", "params": {"s": "x" * 1_048_576}}, "document_too_large"),
    ],
)
def test_bad_create_is_a_problem(payload: dict[str, object], code: str) -> None:  # DOC-1, DOC-5, DOC-6, WF-19
    with pytest.raises(Problem) as info:
        c.decode("instance.create", json.dumps(payload))
    assert info.value.code == code


def test_bad_event_type_and_unknown_kind() -> None:  # WF-23
    with pytest.raises(Problem, match=r"length >= 1 - at `\$\.type`") as info:
        c.decode("instance.event", json.dumps({"workflowUid": "wf", "id": "a", "type": ""}))
    assert info.value.code == "invalid_request"
    with pytest.raises(Problem, match="unknown workflow command kind 'instance.pause'") as info:
        c.decode("instance.pause", "{}")
    assert info.value.code == "invalid_request"
    with pytest.raises(Problem, match="does not decode") as info:
        c.decode("instance.create", "not json")
    assert info.value.code == "invalid_request"


@pytest.mark.parametrize("params", [None, [1], "x", {str(i): i for i in range(1025)}])
def test_a_command_built_in_python_checks_its_document_too(params: object) -> None:  # DOC-1, DOC-5, DOC-6
    with pytest.raises(Problem) as info:
        c.CreateInstance("wf", "a", params)
    assert info.value.code in ("invalid_params", "document_too_large")
    with pytest.raises(Problem):
        c.SendEvent("wf", "a", "t", params)
