"""A Caller Binding's call through the log, without a broker: the owner's status query, where
the engine's records go, and a call answered by a fake owner deciding on the pure core."""

import asyncio
import base64
import json
import os
from typing import Any

import pytest

from sumi.core import records as r
from sumi.core import sealing
from sumi.core.config import Settings, SettingsError
from sumi.core.problems import Problem
from sumi.wire import codec
from sumi.workflow import commands as c
from sumi.workflow._remote import Remote
from sumi.workflow._routes import elsewhere
from sumi.workflow.replies import Replies
from sumi.workflow.rules import _decide as d
from tests.unit.workflow.test_replies import TOPIC, FakeReader
from tests.unit.workflow.wf_kit import T0, Sim, caller

BASE = ("127.0.0.1:9092", "postgresql://postgres@127.0.0.1/postgres")


def query(sim: Sim, secret: bytes, iid: str = "i1") -> r.CommandDecided:
    cmd = c.QueryInstance("wf_1", iid, base64.urlsafe_b64encode(secret).decode())
    (answer,) = d.query(sim.inst, cmd, caller("instance.status"), T0).records
    assert isinstance(answer, r.CommandDecided)
    return answer


def test_the_owner_answers_a_status_query_sealed_under_the_askers_key() -> None:  # WF-21
    sim = Sim()
    sim.create()
    sim.start()
    sim.end("complete", output={"secret": 42})
    secret = os.urandom(32)
    answer = query(sim, secret)
    assert answer.accepted and "secret" not in (answer.result or "")  # the output is sealed on the log
    sealed = json.loads(answer.result or "")
    opened = sealing.unseal(r.DataKey(answer.commandId, "wf_1", "i1", secret, 0), sealed)
    assert json.loads(opened or "") == {"status": "complete", "output": {"secret": 42}}
    assert sealing.unseal(r.DataKey(answer.commandId, "wf_1", "i1", os.urandom(32), 0), sealed) is None


def test_a_status_query_of_an_unknown_or_purged_instance_is_unknown_instance() -> None:  # WF-20
    sim = Sim()
    answer = query(sim, os.urandom(32))
    assert (answer.accepted, json.loads(answer.problem or "")["code"]) == (False, "unknown_instance")


def test_a_status_query_needs_a_whole_key() -> None:  # WF-20 (no such command from anyone else)
    with pytest.raises(Problem):
        c.decode("instance.status", '{"id":"i","replyKey":"short","workflowUid":"w"}')


def test_workflow_commands_go_to_their_instance_and_control_commands_to_their_space() -> None:  # WF-18, WF-9
    create = c.submitted(c.CreateInstance("wf_1", "i1"), command_id="x", space="demo", principal="worker:v", now=1)
    assert elsewhere(create, "wf_1/i1") == ("workflow.commands", "wf_1/i1")
    observe = r.CommandSubmitted("y", "resource.observe", "demo", "sumi-workflow", True, "{}", 1)
    assert elsewhere(observe, "wf_1") == ("commands", "demo")
    assert elsewhere(r.InstanceStatusChanged("wf_1", "i1", "running", 1), "wf_1/i1") is None


def test_the_remote_path_for_every_call_is_a_test_setting() -> None:  # WF-18
    with pytest.raises(SettingsError, match="SUMI_WORKFLOW_REMOTE_BINDINGS"):
        Settings(*BASE, workflow_remote_bindings=True)
    allowed = Settings(*BASE, workflow_remote_bindings=True, nonconformant_test_settings=True)
    assert allowed.to_env()["SUMI_WORKFLOW_REMOTE_BINDINGS"] == "1"


class Owner:
    """An engine whose outbox hands each submitted command to its owner: the pure core decides,
    and the decision comes back through the reader as the log would bring it."""

    def __init__(self, sim: Sim, answers: bool = True) -> None:
        self.sim = sim
        self.answers = answers
        self.replies = Replies(TOPIC)
        self.replies.attach(FakeReader(), FakeReader().tps)  # type: ignore[arg-type]
        self.submitted: list[r.CommandSubmitted] = []

    def emit(self, key: str, records: list[r.Record]) -> "asyncio.Future[None]":
        (rec,) = records
        assert isinstance(rec, r.CommandSubmitted)
        self.submitted.append(rec)
        cmd = c.decode(rec.kind, rec.payload)
        who = d.Caller(rec.commandId, rec.space, rec.principal, rec.kind)
        decision = d.query(self.sim.inst, cmd, who, T0) if isinstance(cmd, c.QueryInstance) else None
        if self.answers and decision is not None:
            asyncio.get_running_loop().call_soon(self.replies.take, codec.encode(decision.records[-1]))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def test_a_status_through_the_log_reads_as_the_local_one() -> None:  # WF-18, WF-21
    sim = Sim()
    sim.create()
    sim.start()
    sim.end("errored", reason="run_threw", message="boom")
    owner = Owner(sim)
    who = d.Caller("cmd1", "demo", "worker:ver_1", "workflow.status")
    got: Any = await Remote(owner, 3, 5.0).status("wf_1/i1", "wf_1", "i1", who)
    assert sim.inst is not None and got == d.status_of(sim.inst)
    (sent,) = owner.submitted
    assert (sent.kind, sent.principal, sent.space, sent.commandId) == (
        "instance.status",
        "worker:ver_1",
        "demo",
        "cmd1",
    )
    assert not owner.replies.waiting


async def test_no_decision_in_time_is_backend_unavailable() -> None:  # WF-27
    sim = Sim()
    sim.create()
    owner = Owner(sim, answers=False)
    who = d.Caller("cmd2", "demo", "worker:ver_1", "workflow.status")
    with pytest.raises(Problem) as refused:
        await Remote(owner, 3, 0.05).status("wf_1/i1", "wf_1", "i1", who)
    assert refused.value.code == "backend_unavailable" and not owner.replies.waiting
