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

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# The sleep and the wait swapped places, their names kept by position: "approval", begun as a
# wait in the live instance, is now a sleep (WF-35: step_definition_mismatch).
SWAPPED = {
    "js": (
        ('await step.sleep("cool-down", 1);', 'await step.waitForEvent("cool-down", { type: "approved" });'),
        (
            'const approval = await step.waitForEvent("approval", { type: "approved", timeoutSeconds: 3600 });',
            'const approval = await step.sleep("approval", 1);',
        ),
    ),
    "py": (
        ('await step.sleep("cool-down", 1)', 'await step.wait_for_event("cool-down", {"type": "approved"})'),
        (
            'approval = await step.wait_for_event("approval", {"type": "approved", "timeout_seconds": 3600})',
            'approval = await step.sleep("approval", 1)',
        ),
    ),
}


@pytest.mark.parametrize("lang", ["js", "py"])
def test_a_changed_step_order_is_found_and_an_unchanged_version_passes(
    host: Host, space: SpaceFixture, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lang: str
) -> None:
    # WF-35 (step_definition_mismatch), WF-36 (completed steps replay without their effects), WF-33
    cli = Cli(host, tmp_path / "home", monkeypatch)
    cli("login", "--url", host.url, "--token", space.editor_token, "--space", space.name)
    example, workflow, worker = EXAMPLES / f"workflow-{lang}", f"order-{lang}", f"orders-{lang}"
    cli("apply", "-f", str(example / "sumi.yaml"))
    cli("instances", "create", workflow, "--id", "live-1", "--params", '{"qty": 1}')
    wait_for(lambda: cli.json("instances", "get", workflow, "live-1"), lambda i: i["status"] == "waiting")
    before = cli.json("instances", "history", workflow, "live-1")
    versions = len(cli.json("list", "version"))

    same = shutil.copytree(example, tmp_path / "same")
    [passed] = cli.json("deploy", str(same), "--worker", worker, "--check")
    assert passed == {"workflow": workflow, "instance": "live-1", "outcome": "replays", "message": ""}

    changed = shutil.copytree(example, tmp_path / "changed")
    main = changed / f"worker.{lang}"
    code = main.read_text()
    for old, new in SWAPPED[lang]:
        assert old in code
        code = code.replace(old, new)
    main.write_text(code)
    done = cli("deploy", str(changed), "--worker", worker, "--check", "-o", "json", code=1)
    [failed] = json.loads(done.stdout)
    assert failed["instance"] == "live-1" and failed["outcome"] == "step_definition_mismatch", failed
    assert "approval" in failed["message"], failed
    assert "1 would fail" in done.stderr, done.stderr

    # Nothing deployed, nothing committed: the instance waits as it did, its history unchanged.
    assert len(cli.json("list", "version")) == versions
    assert cli.json("instances", "history", workflow, "live-1") == before
    assert cli.json("instances", "get", workflow, "live-1")["status"] == "waiting"
    # The check as an option on the change itself: refused, nothing deployed; then the same code passes.
    cli("deploy", str(changed), "--worker", worker, "--checked", code=1)
    assert len(cli.json("list", "version")) == versions
    cli("deploy", str(same), "--worker", worker, "--checked", "-o", "json")
    assert len(cli.json("list", "version")) == versions + 1
