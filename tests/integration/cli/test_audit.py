"""`sumi replay`, `sumi replay --until` and `sumi audit` after a mixed workload on a Host of its own
(a replay compares the whole Host, so no other test's traffic may run beside it): queue traffic
with retries into a dead-letter queue, and a workflow through steps, a retry, a sleep and an event."""

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from sumi.host.audit import SKIP
from sumi.testing import Space, new_space, wait_for
from tests.hostkit import Host, new_settings, running_host
from tests.integration.cli.clikit import Cli

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@dataclass
class Workload:
    host: Host
    space: Space
    cli: Cli
    failed: str  # the message retried into the dead-letter queue
    moment: int  # epoch ms: the instance waiting for its event, one message acknowledged
    then: dict[str, list[str]]  # every read-model table as it stood at `moment`
    workflow: str  # the workflow's UID


def tables(host: Host, schema: str) -> dict[str, list[str]]:
    """Every read-model table of SCHEMA, its rows as text, sorted."""
    with psycopg.connect(host.settings.database_url) as conn:
        names = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s ORDER BY 1", (schema,)
            ).fetchall()
            if t not in SKIP
        ]
        return {
            n: sorted(r for (r,) in conn.execute(f'SELECT t::text FROM "{schema}"."{n}" t').fetchall()) for n in names
        }


def counted(space: Space, **counts: int) -> None:
    """The workflow Resource's observed instance counts caught up (the Host records them when they change)."""
    wait_for(
        lambda: space.resource("order-js")["observed"].get("instanceCounts", {}),
        lambda seen: all(seen.get(k) == v for k, v in counts.items()),
    )


@pytest.fixture(scope="module")
def workload(kafka_bootstrap: str, database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workload]:
    with running_host(new_settings(kafka_bootstrap, database_url)) as host, pytest.MonkeyPatch.context() as mp:
        cli = Cli(host, tmp_path_factory.mktemp("home"), mp)
        space = new_space(host)
        cli("login", "--url", host.url, "--token", host.admin_token, "--space", space.name)
        cli("apply", "-f", str(EXAMPLES / "queue-js" / "sumi.yaml"))
        cli("apply", "-f", str(EXAMPLES / "workflow-js" / "sumi.yaml"))
        _, failed = cli.json("queue", "send", "orders", "ok:1", "fail:2")["messageIds"]
        # The price step fails for 1.5 s after the reserve step: at least one retry.
        cli("instances", "create", "order-js", "--id", "w-1", "--params", '{"sku": "tea", "qty": 2}')
        space.wait_stats("orders", acknowledged=1, deadLettered=1, inFlight=0)
        space.wait_instance("order-js", "w-1", "waiting")
        counted(space, waiting=1)
        time.sleep(0.5)  # the projections settle on what the gateway already answered
        moment = int(time.time() * 1000)
        then = tables(host, host.settings.db_schema)
        time.sleep(0.05)  # every later record is stamped after `moment`
        cli("queue", "send", "orders", "ok:3")
        cli("instances", "event", "order-js", "w-1", "approved", "--payload", '{"by": "auditor"}')
        space.wait_stats("orders", acknowledged=2, deadLettered=1, inFlight=0)
        space.wait_instance("order-js", "w-1")
        counted(space, complete=1, waiting=0)
        workflow = cli.json("get", "workflow", "order-js")["uid"]
        yield Workload(host, space, cli, failed, moment, then, workflow)
        space.close()


def test_replay_after_a_mixed_workload_is_identical(workload: Workload) -> None:
    # QC-43 (state recovered from the records alone), QC-48, WF-36
    out = workload.cli("replay").stdout
    assert out.splitlines()[-1] == "replay: identical; 0 records quarantined", out


def test_replay_until_reproduces_the_state_at_that_moment(workload: Workload) -> None:
    # QC-43, QC-48: the read models at T, exactly, in a schema of their own; the live one untouched
    host, schema = workload.host, f"audit_{uuid.uuid4().hex[:8]}"
    live_before = tables(host, host.settings.db_schema)
    try:
        workload.cli("replay", "--until", str(workload.moment), "--schema", schema)
        assert tables(host, schema) == workload.then
        assert tables(host, host.settings.db_schema) == live_before
    finally:
        with psycopg.connect(host.settings.database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    # And that state is not today's: the instance was waiting, one message was acknowledged.
    now = workload.cli.json("queue", "stats", "orders")
    assert now["acknowledged"] == 2 and workload.then != live_before
    [then_instance] = [r for r in workload.then["workflow_instances"] if '"w-1"' in r or ",w-1," in r]
    assert "waiting" in then_instance and "complete" not in then_instance, then_instance


def test_audit_of_a_message_through_retries_into_the_dead_letter_queue(workload: Workload) -> None:
    # QC-9 (dead-letter queue), QC-7 (maxRetries), QC-27 (retry)
    lines = [json.loads(x) for x in workload.cli("audit", workload.failed, "-o", "json").stdout.splitlines()]
    queue = [c["type"] for c in lines if c["topic"].endswith(".queue")]
    assert queue[0] == "MessageAccepted" and queue[-1] == "MessageDeadLettered", queue
    assert queue.count("MessageRetryScheduled") == 2 and queue.count("BatchDelivered") == 3, queue
    assert "MessagesAcknowledged" not in queue
    assert all({"topic", "partition", "offset", "timestamp", "record"} <= set(c) for c in lines)
    offsets = [(c["topic"], c["partition"], c["offset"]) for c in lines]
    assert len(set(offsets)) == len(offsets)
    text = workload.cli("audit", workload.failed).stdout.splitlines()
    assert len(text) == len(lines) and text[-1].split()[2] == lines[-1]["type"], text


def test_audit_of_an_instance_through_steps_a_retry_a_sleep_and_an_event(workload: Workload) -> None:
    # WF-36 (steps), WF-43 (waitForEvent), WF-23 (sendEvent)
    out = workload.cli("audit", "w-1", "--workflow", workload.workflow, "-o", "json").stdout
    types = [c["type"] for c in map(json.loads, out.splitlines()) if c["topic"].endswith(".workflow")]
    history = [h["type"] for h in workload.cli.json("instances", "history", "order-js", "w-1")]
    assert types == history, (types, history)
    for kind in ("InstanceCreated", "StepAttemptCommitted", "RetryScheduled", "SleepScheduled", "EventAccepted"):
        assert kind in types, (kind, types)
    assert types.index("RetryScheduled") < types.index("SleepScheduled") < types.index("EventAccepted")
    assert types[-1] == "InstanceStatusChanged", types
