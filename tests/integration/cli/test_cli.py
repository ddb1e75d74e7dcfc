"""The `sumi` CLI against the real Host: every verb in-process (main(argv), tests.integration.cli.clikit),
and the installed entry point once as a subprocess, the way a script runs it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostkit import Host, SpaceFixture
from tests.integration.cli.clikit import Cli

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def cli(host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cli:
    return Cli(host, tmp_path, monkeypatch)


def test_apply_get_instances_audit_delete(cli: Cli, host: Host, space: SpaceFixture) -> None:
    # QC-46 (a re-apply is the same Operation, nothing new), WF-18, WF-43, QC-9
    cli("login", "--url", host.url, "--token", space.editor_token, "--space", space.name)
    first = cli.json("apply", "-f", str(EXAMPLES / "queue-js" / "sumi.yaml"))
    assert [o["outcome"] for o in first] == ["created"] * 4, first
    again = cli.json("apply", "-f", str(EXAMPLES / "queue-js" / "sumi.yaml"))
    assert [o["outcome"] for o in again] == ["unchanged"] * 4, again
    queue = cli.json("get", "queue", "orders")
    assert queue["state"] == "active" and queue["generation"] == 1
    assert {r["name"] for r in cli.json("list")} >= {"orders", "orders-dead", "shipper", "shipper-orders"}
    [mid] = cli.json("queue", "send", "orders", "ok:7")["messageIds"]

    cli("apply", "-f", str(EXAMPLES / "workflow-js" / "sumi.yaml"))
    started = cli.json("instances", "create", "order-js", "--id", "o-1", "--params", '{"qty": 2}')
    assert started["id"] == "o-1"
    waiting = cli.json("instances", "get", "order-js", "o-1")
    assert waiting["status"] in ("queued", "running", "sleeping", "waiting"), waiting
    # An event sent before the instance waits for it is kept for it (WF-43).
    cli("instances", "event", "order-js", "o-1", "approved", "--payload", '{"by": "cli"}')
    done = cli.json("instances", "get", "order-js", "o-1", "--wait", "60")
    assert done["status"] == "complete" and done["output"]["approvedBy"] == "cli", done
    types = [h["type"] for h in cli.json("instances", "history", "order-js", "o-1")]
    assert types[0] == "InstanceCreated" and "EventAccepted" in types, types
    assert [i["id"] for i in cli.json("instances", "list", "order-js")] == ["o-1"]
    assert cli.json("queue", "stats", "orders")["acknowledged"] == 1

    workflow = cli.json("get", "workflow", "order-js")["uid"]
    lines = [json.loads(line) for line in cli("audit", "o-1", "--workflow", workflow, "-o", "json").stdout.splitlines()]
    assert [c["type"] for c in lines if c["topic"].endswith(".workflow")] == types, lines
    assert all({"topic", "partition", "offset", "timestamp"} <= set(c) for c in lines)
    message = cli("audit", mid).stdout.splitlines()
    assert message[0].split()[2] == "MessageAccepted" and any("MessagesAcknowledged" in m for m in message), message

    deleted = cli.json("delete", "-f", str(EXAMPLES / "queue-js" / "sumi.yaml"))
    assert [o["outcome"] for o in deleted] == ["deleted"] * 4, deleted
    cli("get", "queue", "orders", code=3)
    # Applied again after the delete: created again (the chained Idempotency-Key), not the old Operation.
    assert [o["outcome"] for o in cli.json("apply", "-f", str(EXAMPLES / "queue-js" / "sumi.yaml"))] == ["created"] * 4


PROBLEMS = [
    # (argv after the common flags, exit code, problem code)
    (["get", "queue", "nothing-here"], 3, "not_found"),
    (["instances", "get", "order-none", "x"], 3, "not_found"),
    (["space", "create", "Not A Name"], 8, "invalid_request"),
]


@pytest.mark.parametrize("argv, code, problem", PROBLEMS)
def test_problems_are_one_line_and_an_exit_code(
    cli: Cli, host: Host, space: SpaceFixture, argv: list[str], code: int, problem: str
) -> None:
    # QC-14 (not found in the Space), WF-20
    done = cli("--url", host.url, "--token", host.admin_token, "--space", space.name, *argv, code=code)
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("sumi: ") and f": {problem}: " in line, line
    as_json = json.loads(
        cli(
            "--url", host.url, "--token", host.admin_token, "--space", space.name, *argv, "-o", "json", code=code
        ).stdout
    )
    assert as_json["problem"]["code"] == problem and as_json["exitCode"] == code


def test_exit_codes_by_kind(cli: Cli, host: Host, space: SpaceFixture) -> None:
    # QC-15 (authority), WF-19 (instance_exists), WF-27 (unavailable: retry)
    base = ["--url", host.url, "--space", space.name]
    assert "unauthenticated" in cli(*base, "--token", "sumi_bogus", "list", code=6).stderr
    assert "forbidden" in cli(*base, "--token", space.viewer_token, "queue", "send", "q", "x", code=7).stderr
    assert "name_conflict" in cli(*base, "--token", host.admin_token, "space", "create", space.name, code=4).stderr
    cli(*base, "--token", space.editor_token, "apply", "-f", str(EXAMPLES / "workflow-js" / "sumi.yaml"))
    cli(*base, "--token", space.editor_token, "instances", "create", "order-js", "--id", "a")
    again = cli(*base, "--token", space.editor_token, "instances", "create", "order-js", "--id", "a", code=4)
    assert "instance_exists" in again.stderr
    assert "cannot reach" in cli("--url", "http://127.0.0.1:9", "--token", "t", "--space", "s", "list", code=5).stderr
    assert "no token" in cli("--url", host.url, "list", code=2).stderr
    cli("frobnicate", code=2)
    assert "Usage" in cli("queue", "--help").stdout


def test_token_create_list_revoke(cli: Cli, host: Host, space: SpaceFixture) -> None:
    # QC-15: an admin issues, lists and revokes tokens; the listing never shows a token
    admin = ["--url", host.url, "--token", host.admin_token]
    principal = "cli-" + os.urandom(4).hex()
    issued = cli.json(*admin, "token", "create", principal, "--viewer", space.name)
    listed = cli.json(*admin, "token", "list")
    mine = [p for p in listed if p["principal"] == principal]
    assert [(p["tokens"], p["grants"]) for p in mine] == [(1, [{"space": space.name, "role": "viewer"}])], listed
    table = cli(*admin, "token", "list").stdout
    assert principal in table and f"{space.name}:viewer" in table and issued["token"] not in table, table
    assert "forbidden" in cli("--url", host.url, "--token", space.editor_token, "token", "list", code=7).stderr
    cli(*admin, "token", "revoke", principal)
    assert principal not in [p["principal"] for p in cli.json(*admin, "token", "list")]


def test_the_installed_entry_point(host: Host, space: SpaceFixture, tmp_path: Path) -> None:
    # QC-14 (not in the Space: not_found): the installed entry point's exit code and line reach the shell
    sumi = Path(sys.executable).parent / "sumi"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMI_")}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / ".config"))
    argv = [str(sumi), "--url", host.url, "--token", host.admin_token, "--space", space.name]
    done = subprocess.run([*argv, "get", "queue", "nothing-here"], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 3 and done.stderr.startswith("sumi: ") and ": not_found: " in done.stderr, done
    helped = subprocess.run([str(sumi), "queue", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert helped.returncode == 0 and "Usage" in helped.stdout and "send" in helped.stdout, helped
