"""Caller Bindings for the other engines (a queue handler's `env.NAME`, WF-18..27).

An engine that does not own the instances (the queue engine) cannot decide for them: it
appends the typed command to `<prefix>.workflow.commands`, as the gateway does, and waits
for its `CommandDecided` on the instance log. It follows that log with the one fold of an
instance (`_state.evolve`), so `get` and `status()` answer from the same facts the
workflow engine decided on, and a create's own instance is known once its decision is
(both are in one transaction, on one partition). No answer in time, or a broker that
cannot take the command: `backend_unavailable` (WF-27).

The fold holds the documents as the log does, sealed (sumi.core.sealing): a status opens the
output and error message it answers with their instance's key, read from the key topic when
asked (and waited for: the key commits with the record, on another topic). Decrypting only
what a caller asks for keeps the follower as cheap as it was.

It starts following on the first call: a queue engine whose handlers never call a
Workflow reads nothing of the instance log (before, every queue engine decoded every step
of every workflow, idle queues or not).
"""

import asyncio
import contextlib
import dataclasses
import json
import logging
from typing import Any

from aiokafka import AIOKafkaProducer

from sumi.control.rules.state import VersionView
from sumi.core import ids
from sumi.core import records as r
from sumi.core.clock import now_ms
from sumi.core.config import Settings
from sumi.core.offloop import OffLoop
from sumi.core.problems import Problem
from sumi.runtime import HostError
from sumi.wire import kafka
from sumi.wire.keyreader import KeyReader
from sumi.wire.topics import instance_key
from sumi.workflow import commands as c
from sumi.workflow._bindings import binding_target, create_command, event_command
from sumi.workflow.rules._decide import status_of
from sumi.workflow.rules._state import Instance, evolve

log = logging.getLogger("sumi.workflow")


class WorkflowClient:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.instances: dict[str, Instance] = {}
        self.waiting: dict[str, asyncio.Future[r.CommandDecided]] = {}
        self.producer: AIOKafkaProducer | None = None
        self.ready = asyncio.Event()
        self.wanted = asyncio.Event()
        self.off_loop = OffLoop()
        self.keys = KeyReader(settings)

    async def run(self) -> None:
        """Follow the instance log once a binding is called (run beside the host engine's own loops)."""
        await self.wanted.wait()
        # The clients stop however this ends, a stop signal while they start included.
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(self.keys.close)
            self.producer = await kafka.started(stack, kafka.new_producer(self.settings))
            consumer = await kafka.started(stack, kafka.new_consumer(self.settings))
            tps = await kafka.partitions(consumer, self.settings.topic("workflow"))
            await kafka.read_to_end(consumer, tps, self._fold)
            self.ready.set()
            await kafka.follow(consumer, self._fold)

    def _fold(self, m: Any, before_end: bool = True) -> None:
        rec = kafka.decode(m.value)
        if isinstance(rec, kafka.Rejected):
            return
        if isinstance(rec, r.CommandDecided):
            fut = self.waiting.pop(rec.commandId, None)
            if fut is not None and not fut.done():
                fut.set_result(rec)
            return
        if not isinstance(rec, r.WorkflowRecord):
            return
        key = m.key.decode() if m.key else ""
        inst = evolve(self.instances.get(key), rec)
        if inst is not None and inst.purged:
            self.instances.pop(key, None)
        elif inst is not None:
            self.instances[key] = inst

    async def call(self, code: VersionView | None, method: str, args: dict[str, Any]) -> Any:
        uid = binding_target(code, args)
        assert code is not None
        try:
            return await self._call(uid, code, method, args)
        except Problem as problem:
            raise HostError(problem.code, problem.detail) from None
        except Exception:
            # A Host fault, not an outage: the caller may only retry, so whoever reads the log must see it.
            log.exception("workflow binding %s on instance %s/%s failed", method, uid, args.get("id"))
            raise HostError("backend_unavailable", f"{method} failed in the Host (logged)") from None

    async def _call(self, uid: str, code: VersionView, method: str, args: dict[str, Any]) -> Any:
        if method == "workflow.create":
            # Checking a document may take tens of ms of CPU: off the loop that serves every Space.
            create = await self.off_loop.run(code.space, create_command, uid, args)
            await self._decided(create, code)
            return {"id": create.instance_id}
        iid = str(args.get("id"))
        if method in ("workflow.get", "workflow.status"):
            await self._ready()
            inst = self.instances.get(instance_key(uid, iid))
            if inst is None:
                raise Problem("unknown_instance", f"no instance {iid}")  # WF-20
            return {"id": iid} if method == "workflow.get" else await self._status(inst)
        if method == "workflow.sendEvent":
            return await self._decided(await self.off_loop.run(code.space, event_command, uid, args), code)
        if method == "workflow.terminate":
            return {"status": (await self._decided(c.TerminateInstance(uid, iid), code))["status"]}
        raise Problem("invalid_request", f"unknown binding method {method}")

    async def _status(self, inst: Instance) -> dict[str, Any]:
        """WF-21 from the sealed fold: what the document shows, opened (its key waited for)."""
        output = inst.output if inst.status == "complete" else None
        message = inst.error[1] if inst.status == "errored" and inst.error is not None else None
        opened, said = await self.keys.open_texts(output, message)
        if (output is None) != (opened is None) or (message is None) != (said is None):
            log.error(
                "workflow binding status: instance %s/%s: its key did not come", inst.workflow_uid, inst.instance_id
            )
            raise Problem("backend_unavailable", "the instance's documents cannot be opened yet")
        error = None if inst.error is None else (inst.error[0], said)
        return status_of(dataclasses.replace(inst, output=opened, error=error))

    async def _ready(self) -> None:
        self.wanted.set()
        try:
            await asyncio.wait_for(self.ready.wait(), self.settings.decision_timeout)
        except TimeoutError:
            raise Problem("backend_unavailable", "the workflow backend is not reachable") from None

    async def _decided(self, cmd: c.WorkflowCommand, code: VersionView) -> Any:
        """Append the command, then wait for its decision (the gateway's request-reply, over the log)."""
        await self._ready()
        assert self.producer is not None
        command_id = ids.new_ulid()
        fut: asyncio.Future[r.CommandDecided] = asyncio.get_running_loop().create_future()
        self.waiting[command_id] = fut
        rec = await self.off_loop.run(
            code.space,
            c.submitted,
            cmd,
            command_id=command_id,
            space=code.space,
            principal=f"worker:{code.uid}",
            now=now_ms(),
        )
        topic, key = self.settings.topic("workflow.commands"), c.key_of(cmd)
        try:
            async with asyncio.timeout(self.settings.decision_timeout):
                await (await kafka.send(self.producer, topic, key, rec, self.settings.partitions))
                decided = await fut
        except (TimeoutError, Exception) as exc:
            raise Problem("backend_unavailable", f"no decision in time: {exc!r}") from None
        finally:
            self.waiting.pop(command_id, None)
        if not decided.accepted:
            raise Problem.from_json(json.loads(decided.problem or "{}"))
        return json.loads(decided.result) if decided.result else None
