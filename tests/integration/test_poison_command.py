"""A command whose payload decodes to no command is answered, not fatal (issue 7: no poison pill).

Written raw to the commands topic (any producer can), each bad command gets a rejected
decision `invalid_request`, read back through the `decisions` read model; the control
processor stays the same process and decides the next, valid command: its Space exists.
"""

import asyncio
import time
import uuid
from typing import Any

import httpx
import psycopg
import pytest
from aiokafka import AIOKafkaProducer

from sumi.control.rules.forms.names import QUEUE
from sumi.core import records as r
from sumi.wire import codec
from sumi.wire.topics import partition_for
from tests.hostkit import Host

pytestmark = pytest.mark.integration

BAD = {
    "not-json": ("space.create", "\x00\xff{ this is not JSON"),
    "truncated": ("space.create", '{"name": "abc'),
    "wrong-type": ("space.create", '{"name": 42}'),
    "wrong-shape": ("resource.create", '["name", "form", "spec"]'),
    "unknown-field": ("token.revoke", '{"principal": "p", "everything": true}'),
    "unknown-kind": ("space.explode", "{}"),
}


async def _decision(host: Host, command_id: str, timeout: float = 30.0) -> tuple[Any, ...]:
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(
        host.settings.database_url, autocommit=True, options=f"-c search_path={host.settings.db_schema}"
    ) as conn:
        while time.monotonic() < deadline:
            cursor = await conn.execute(
                "SELECT accepted, status, problem FROM decisions WHERE command_id = %s", (command_id,)
            )
            row = await cursor.fetchone()
            if row is not None:
                return tuple(row)
            await asyncio.sleep(0.1)
    raise AssertionError(f"no decision for {command_id} in {timeout}s")


async def test_poison_commands_are_rejected_and_the_next_command_is_decided(host: Host) -> None:
    # issue 7 "What must be shown": a poison command on sumi.commands; QC-48 (the processor goes on).
    control = host.supervisor.procs["control"]
    space = "poison-" + uuid.uuid4().hex[:8]
    run = uuid.uuid4().hex[:8]
    ids = {name: f"{name}-{run}" for name in BAD}
    good_id = f"good-{run}"
    settings = host.settings
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        # One partition, in order: every bad command comes before the good one.
        partition = partition_for(space, settings.partitions)
        commands = [
            r.CommandSubmitted(ids[name], kind, space, "admin", True, payload, int(time.time() * 1000))
            for name, (kind, payload) in BAD.items()
        ]
        commands.append(
            r.CommandSubmitted(
                good_id, "space.create", space, "admin", True, f'{{"name":"{space}"}}', int(time.time() * 1000)
            )
        )
        for cmd in commands:
            await producer.send_and_wait(
                settings.topic("commands"), codec.encode(cmd), key=space.encode(), partition=partition
            )
    finally:
        await producer.stop()

    for name, command_id in ids.items():
        accepted, status, problem = await _decision(host, command_id)
        assert (accepted, status) == (False, 400), name
        assert problem["code"] == "invalid_request", (name, problem)
    accepted, status, _ = await _decision(host, good_id)
    assert (accepted, status) == (True, 201)
    admin = {"Authorization": f"Bearer {host.admin_token}"}
    async with httpx.AsyncClient(base_url=host.url, headers=admin, timeout=30) as client:
        listed = await client.get("/v2/spaces")
        assert space in [item["name"] for item in listed.json()["items"]]
        queue = await client.post(
            f"/v2/spaces/{space}/resources",
            headers={"Idempotency-Key": run},
            json={"name": "q", "form": QUEUE, "spec": {"retentionSeconds": 60}},
        )
        assert queue.status_code == 202, queue.text  # the processor holds the Space
    assert control.poll() is None and host.supervisor.procs["control"] is control  # never exited, never restarted
