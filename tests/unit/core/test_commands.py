"""Typed commands: decoded and validated once; a payload that does not decode is a rejected decision."""

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sumi.control import ControlState, decide, evolve
from sumi.control.rules.forms import FORMS
from sumi.control.rules.forms.names import QUEUE
from sumi.core import commands as c
from sumi.core import records as r
from sumi.core.canonical import canonical
from sumi.core.problems import STATUS, Problem
from tests.decisions_kit import NOW, command, problem, reply, run

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
# Objects whose keys are the real field names, so that decoding gets past "unknown field" often.
FIELDS = sorted({f for cls in c.KINDS.values() for f in cls.__struct_encode_fields__} | {"name", "space", "role"})
field_objects = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6)
kinds = st.sampled_from(sorted(c.KINDS)) | st.text(max_size=20)


def _state() -> ControlState:
    s = ControlState()
    run(s, command("space.create", {"name": "demo"}))
    run(s, command("resource.create", {"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}}))
    return s


def _raw(kind: str, payload: str, cid: str = "poison") -> r.CommandSubmitted:
    return r.CommandSubmitted(cid, kind, "demo", "alice", True, payload, NOW)


def _only_reply(cmd: r.CommandSubmitted, events: list[Any]) -> r.CommandDecided:
    decided = [e for e in events if isinstance(e, r.CommandDecided) and e.commandId == cmd.commandId]
    assert len(decided) == 1, events
    return decided[0]


@given(kind=kinds, payload=json_values | field_objects)
def test_arbitrary_json_payloads_never_raise_out_of_decide(kind: str, payload: Any) -> None:
    state = _state()
    cmd = _raw(kind, json.dumps(payload))
    decision = decide(state, cmd, NOW)
    decided = _only_reply(cmd, decision.events)
    if not decided.accepted:
        assert json.loads(decided.problem or "{}")["code"] in STATUS
    try:
        c.decode(kind, cmd.payload)
    except Problem as undecodable:
        assert undecodable.code == "invalid_request"
        assert not decided.accepted and decided.status == 400
        assert decision.followups == []
    for event in decision.events:  # what was decided folds
        evolve(state, event)


@given(kind=kinds, payload=st.text() | st.binary().map(lambda b: b.decode("latin-1")))
def test_payloads_that_are_not_json_are_rejected_invalid_request(kind: str, payload: str) -> None:
    cmd = _raw(kind, payload)
    events = decide(_state(), cmd, NOW).events
    decided = _only_reply(cmd, events)
    try:
        json.loads(payload)
    except ValueError:
        assert not decided.accepted
        assert json.loads(decided.problem or "{}")["code"] == "invalid_request"


@pytest.mark.parametrize(
    ("kind", "payload", "says"),
    [
        ("space.create", "{", "truncated"),
        ("space.create", "", "truncated"),
        ("space.create", "[]", "Expected `object`"),
        ("space.create", '{"name": 7}', "Expected `str`"),
        ("space.create", '{"name": "a", "extra": 1}', "unknown field"),
        ("space.create", "{}", "missing required field `name`"),
        ("token.create", '{"principal": "p", "tokenHash": "h", "admin": 1}', "Expected `bool`"),
        ("token.create", '{"principal": "p", "tokenHash": "h", "grants": [{"space": "s", "role": "x"}]}', "role"),
        ("resource.create", '{"name": "q", "form": "f", "spec": []}', "$.spec"),
        ("operation.report", '{"operationId": "op", "outcome": "maybe"}', "$.outcome"),
        ("no.such.kind", "{}", "unknown command kind"),
        ("space.create", '{"name": "\ud800"}', "surrogate"),  # a lone surrogate, as a JSON escape
        pytest.param("space.create", '{"name": "' + chr(0xD800) + '"}', "surrogates", id="raw-lone-surrogate"),
    ],
)
def test_a_wrong_payload_is_invalid_request_naming_what_is_wrong(kind: str, payload: str, says: str) -> None:
    cmd = _raw(kind, payload)
    events = decide(_state(), cmd, NOW).events
    assert [type(e) for e in events] == [r.CommandDecided]  # nothing else happens
    body = problem(events)
    assert body["code"] == "invalid_request" and body["status"] == 400
    assert says in body["detail"]


def test_an_unexpected_error_rejects_the_command_and_the_next_one_is_decided(monkeypatch: Any) -> None:
    def broken(spec: Any) -> Any:
        raise KeyError("a bug")

    state = _state()
    monkeypatch.setattr(FORMS[QUEUE], "validate_spec", broken)
    failed = run(state, command("resource.create", {"name": "q2", "form": QUEUE, "spec": {}}))
    assert problem(failed)["code"] == "backend_unavailable"
    assert state.space("demo").by_ref("q2") is None
    monkeypatch.undo()
    assert reply(run(state, command("space.create", {"name": "next"}, space="next"))).status == 201


@given(
    name=st.text(max_size=30),
    grants=st.lists(st.builds(c.Grant, st.text(max_size=10), st.sampled_from(["viewer", "editor"])), max_size=3),
    admin=st.booleans(),
)
def test_typed_commands_round_trip_through_their_canonical_payload(
    name: str, grants: list[c.Grant], admin: bool
) -> None:
    for cmd in (
        c.SpaceCreate(name=name),
        c.TokenCreate(principal=name, token_hash="h", admin=admin, grants=tuple(grants)),
        c.ResourceUpdate(ref=name, spec={"k": [name, 1]}, private_inputs={}),
        c.OperationReport(operation_id=name, outcome="reconciling", effect="unknown", error={"code": "x"}),
    ):
        try:
            text = c.payload(cmd)
        except ValueError:  # a lone surrogate is no JSON text
            continue
        assert text == canonical(json.loads(text))
        assert c.decode(cmd.kind, text) == cmd


def test_payloads_keep_the_log_s_camel_case_field_names() -> None:
    text = c.payload(c.TokenCreate(principal="p", token_hash="h", admin=True))
    assert text == '{"admin":true,"principal":"p","tokenHash":"h"}'
    assert c.payload(c.OperationApply(operation_id="op_1")) == '{"operationId":"op_1"}'
