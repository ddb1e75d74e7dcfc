"""The commands a Caller Binding builds from a runtime's parsed frame (WF-18..24), checked once."""

import pytest

from sumi.core.problems import Problem
from sumi.workflow import commands as c
from sumi.workflow._bindings import create_command, event_command


def test_create_without_an_id_is_issued_one() -> None:
    # WF-19: an omitted ID is issued by the Host, and the answer says so
    command = create_command("res_1", {"binding": "FLOWS", "params": {"a": [1, 2.5, "x"]}})
    assert command.instance_id.startswith("wfi_") and command.issued
    assert command.params == {"a": [1, 2.5, "x"]}
    assert c.decode(command.kind, c.payload(command)) == command


def test_create_with_an_id_keeps_it() -> None:
    # WF-19
    command = create_command("res_1", {"binding": "FLOWS", "id": "order-7"})
    assert (command.instance_id, command.issued, command.params) == ("order-7", False, c.UNSET)


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"id": None}, "invalid_request"),
        ({"id": ""}, "invalid_request"),
        ({"id": "x" * 257}, "invalid_request"),
        ({"id": "a\ud800"}, "invalid_request"),
        ({"params": [1]}, "invalid_params"),
        ({"params": {"k": "\udc00"}}, "invalid_params"),
    ],
)
def test_create_refuses_what_the_http_side_refuses(args: dict[str, object], code: str) -> None:
    # WF-19, DOC-1, DOC-5: the same codes as a create over HTTP
    with pytest.raises(Problem) as caught:
        create_command("res_1", {"binding": "FLOWS", **args})
    assert caught.value.code == code


def test_an_event_is_typed_and_its_names_checked() -> None:
    # WF-23, WF-24
    event = event_command("res_1", {"binding": "FLOWS", "id": "i", "type": "go", "payload": {"ok": True}})
    assert isinstance(event, c.SendEvent) and (event.type, event.payload) == ("go", {"ok": True})
    with pytest.raises(Problem) as caught:
        event_command("res_1", {"binding": "FLOWS", "id": "i", "type": "g\ud800"})
    assert caught.value.code == "invalid_request"
