"""A binding's status reads documents opened, never as the log holds them (issue 40): the queue
engine's client folds the instance log sealed and opens the output and error message it answers
with; a sealed or empty document that reaches a decision is a named Host fault, never a JSON
decode error. Pure: no broker (every key is in the ring already, so nothing is read)."""

import json

import pytest

from sumi.core import records as r
from sumi.core import sealing
from sumi.core.config import Settings
from sumi.workflow.client import WorkflowClient
from sumi.workflow.rules import _decide as d
from sumi.workflow.rules._state import Instance, evolve

KEY = sealing.new_key("dk_1", "wf", "i", 1)


def sealed_log(*ending: r.InstanceStatusChanged) -> Instance:
    """The fold of an instance's log as a reader that does not open it holds it."""
    inst = None
    for rec in (r.InstanceCreated("wf", "i", "demo", 1, '{"p":1}'), *ending):
        inst = evolve(inst, sealing.seal_record(rec, ring()))
    assert inst is not None
    return inst


def ring() -> sealing.KeyRing:
    keys = sealing.KeyRing()
    keys.add(KEY)
    return keys


def client() -> WorkflowClient:
    c = WorkflowClient(Settings("127.0.0.1:1", "postgresql://unused"))  # nothing connects here
    c.keys.ring = ring()
    return c


async def test_the_client_answers_a_sealed_output_opened() -> None:  # WF-21
    inst = sealed_log(r.InstanceStatusChanged("wf", "i", "complete", 2, '{"n":42}'))
    assert sealing.is_sealed(inst.output)
    assert await client()._status(inst) == {"status": "complete", "output": {"n": 42}}


async def test_the_client_answers_a_sealed_error_message_opened() -> None:  # WF-21, WF-22
    inst = sealed_log(r.InstanceStatusChanged("wf", "i", "errored", 2, None, "run_threw", "Error: boom"))
    assert inst.error is not None and sealing.is_sealed(inst.error[1])
    got = await client()._status(inst)
    assert got == {"status": "errored", "error": {"reason": "run_threw", "message": "Error: boom"}}


@pytest.mark.parametrize("text", [sealing.seal(KEY, '{"n":42}'), ""])
def test_a_document_never_opened_is_a_named_fault_not_a_decode_error(text: str) -> None:  # WF-21
    inst = Instance("wf", "i", status="complete", output=text)
    with pytest.raises(d.SealedDocument):
        d.status_of(inst)
    with pytest.raises(d.SealedDocument):
        d.doc(text)
    sealed_message = Instance("wf", "i", status="errored", error=("run_threw", sealing.seal(KEY, "boom")))
    with pytest.raises(d.SealedDocument):
        d.status_of(sealed_message)


def test_an_opened_document_reads_as_json() -> None:  # WF-21
    assert d.status_of(Instance("wf", "i", status="complete", output='{"n":1}')) == {
        "status": "complete",
        "output": json.loads('{"n":1}'),
    }
