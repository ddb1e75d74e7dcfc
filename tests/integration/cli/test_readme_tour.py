"""The README's five-minute tour, run command by command as a newcomer would.

The short form runs it on the session's Host with the profile `sumi up` writes (its `local`
context: the URL and the token file). The long form (SUMI_TOUR_UP=1) runs it the way a user
does after `make up`: a real `sumi up` from a fresh state directory and an empty HOME, whose
profile alone tells the CLI where the Host is."""

import os
import re
import shlex
import signal
from pathlib import Path

import pytest

from sumi.cli import _profile
from tests.hostkit import Host
from tests.integration.cli.clikit import Cli
from tests.integration.test_up_lifecycle import Up

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[3] / "README.md"


def tour() -> list[list[str]]:
    block = README.read_text().split("## The five-minute tour", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        for part in line.split("&&"):
            commands.append(shlex.split(part))
    return commands


def run_tour(cli: Cli) -> None:
    commands = tour()
    assert len(re.findall(r"^sumi ", "\n".join(" ".join(c) for c in commands), re.M)) <= 9
    outputs = []
    for argv in commands:
        assert argv[0] == "sumi", argv
        outputs.append(cli(*argv[1:]).stdout)
    assert "complete" in outputs[-1] and "approvedBy" in outputs[-1] and '"me"' in outputs[-1], outputs[-1]
    stats = cli.json("queue", "stats", "orders")
    assert stats["acknowledged"] == 1, stats


def test_the_tour_ends_with_the_workflow_output(host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # QC-9 (the message dead-lettered), WF-18, WF-43; at most eight commands after `make up`
    cli = Cli(host, tmp_path, monkeypatch)
    # What `sumi up` writes: the local context, its URL and its token file.
    (tmp_path / "admin-token").write_text(host.admin_token + "\n")
    _profile.set_context("local", {"url": host.url, "token-file": str(tmp_path / "admin-token")})
    run_tour(cli)


@pytest.mark.skipif(not os.environ.get("SUMI_TOUR_UP"), reason="long form: SUMI_TOUR_UP=1 (a real `sumi up`)")
def test_the_tour_after_sumi_up_from_a_fresh_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # QC-9, WF-18, WF-43: the tour exactly as the README gives it, after a first `sumi up`
    home = tmp_path / "home"
    up = Up(tmp_path, home=home)
    try:
        up.wait_line("sumi: ready in")
        run_tour(Cli(None, home, monkeypatch))
    finally:
        up.proc.send_signal(signal.SIGINT)
        try:
            up.proc.wait(60)
        finally:
            up.kill()
