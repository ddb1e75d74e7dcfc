"""`sumi deploy DIR --worker W --check`: each live instance of the worker's workflows replayed
against the new code in a runtime context of the CLI's own, no effect run, nothing deployed."""

import json
import shutil
from pathlib import Path

import pytest

from sumi.testing import wait_for
from tests.hostkit import Host, SpaceFixture
from tests.integration.cli.clikit import Cli

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "workflow-js"
# The sleep and the wait swapped places, their names kept by position: "approval", begun as a
# wait in the live instance, is now a sleep (WF-35: step_definition_mismatch).
SWAPPED = (
    ('await step.sleep("cool-down", 1);', 'await step.waitForEvent("cool-down", { type: "approved" });'),
    (
        'const approval = await step.waitForEvent("approval", { type: "approved", timeoutSeconds: 3600 });',
        'const approval = await step.sleep("approval", 1);',
    ),
)


def test_a_changed_step_order_is_found_and_an_unchanged_version_passes(
    host: Host, space: SpaceFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # WF-35 (step_definition_mismatch), WF-36 (completed steps replay without their effects), WF-33
    cli = Cli(host, tmp_path / "home", monkeypatch)
    cli("login", "--url", host.url, "--token", space.editor_token, "--space", space.name)
    cli("apply", "-f", str(EXAMPLE / "sumi.yaml"))
    cli("instances", "create", "order-js", "--id", "live-1", "--params", '{"qty": 1}')
    wait_for(lambda: cli.json("instances", "get", "order-js", "live-1"), lambda i: i["status"] == "waiting")
    before = cli.json("instances", "history", "order-js", "live-1")
    versions = len(cli.json("list", "version"))

    same = shutil.copytree(EXAMPLE, tmp_path / "same")
    [passed] = cli.json("deploy", str(same), "--worker", "orders-js", "--check")
    assert passed == {"workflow": "order-js", "instance": "live-1", "outcome": "replays", "message": ""}

    changed = shutil.copytree(EXAMPLE, tmp_path / "changed")
    code = (changed / "worker.js").read_text()
    for old, new in SWAPPED:
        assert old in code
        code = code.replace(old, new)
    (changed / "worker.js").write_text(code)
    done = cli("deploy", str(changed), "--worker", "orders-js", "--check", "-o", "json", code=1)
    [failed] = json.loads(done.stdout)
    assert failed["instance"] == "live-1" and failed["outcome"] == "step_definition_mismatch", failed
    assert "approval" in failed["message"], failed
    assert "1 would fail" in done.stderr, done.stderr

    # Nothing deployed, nothing committed: the instance waits as it did, its history unchanged.
    assert len(cli.json("list", "version")) == versions
    assert cli.json("instances", "history", "order-js", "live-1") == before
    assert cli.json("instances", "get", "order-js", "live-1")["status"] == "waiting"
