"""The README's five-minute tour on the session's Host, with the profile `sumi up` writes (its
`local` context: the URL and the token file). The tour after a real `sumi up` from a fresh state
directory and an empty HOME, whose profile alone tells the CLI where the Host is, runs in
tests/integration/test_up_lifecycle.py (it shares that test's first start)."""

from pathlib import Path

import pytest

from sumi.cli import _profile
from tests.hostkit import Host
from tests.integration.cli.clikit import Cli, run_tour

pytestmark = pytest.mark.integration


def test_the_tour_ends_with_the_workflow_output(host: Host, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # QC-9 (the message dead-lettered), WF-18, WF-43; at most eight commands after `make up`
    cli = Cli(host, tmp_path, monkeypatch)
    # What `sumi up` writes: the local context, its URL and its token file.
    (tmp_path / "admin-token").write_text(host.admin_token + "\n")
    _profile.set_context("local", {"url": host.url, "token-file": str(tmp_path / "admin-token")})
    run_tour(cli)
