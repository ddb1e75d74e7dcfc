"""The README's five-minute tour, run command by command against a Host, as a newcomer would."""

import re
import shlex
from pathlib import Path

import pytest

from sumi.cli import _profile
from tests.hostkit import new_settings, running_host
from tests.integration.cli.clikit import Cli

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


def test_the_tour_ends_with_the_workflow_output(
    kafka_bootstrap: str, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DOC-1 (the output document), WF-18, QC-9; at most eight commands after `make up`
    commands = tour()
    assert len(re.findall(r"^sumi ", "\n".join(" ".join(c) for c in commands), re.M)) <= 9
    with running_host(new_settings(kafka_bootstrap, database_url)) as host:
        cli = Cli(host, tmp_path, monkeypatch)
        # What `sumi up` writes: the local context, its URL and its token file.
        (tmp_path / "admin-token").write_text(host.admin_token + "\n")
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
        _profile.set_context("local", {"url": host.url, "token-file": str(tmp_path / "admin-token")})
        outputs = []
        for argv in commands:
            assert argv[0] == "sumi", argv
            outputs.append(cli(*argv[1:]).stdout)
        assert "complete" in outputs[-1] and "approvedBy" in outputs[-1] and '"me"' in outputs[-1], outputs[-1]
        stats = cli.json("queue", "stats", "orders")
        assert stats["acknowledged"] == 1, stats
