"""The `sumi` CLI driven in-process (main(argv), its exit code, its stdout and stderr): the same
code path as the installed entry point without a Python start-up per command."""

import io
import json
import os
import re
import shlex
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sumi.cli import main
from tests.hostkit import Host


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


class Cli:
    def __init__(self, host: Host | None, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        # Never the real user's profile; the Host's own settings for replay and audit (none: a Host
        # known by the profile alone, as a user's after `sumi up`).
        for name in [n for n in os.environ if n.startswith("SUMI_")]:
            monkeypatch.delenv(name)
        for name, value in (host.settings.to_env() if host else {}).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))

    def __call__(self, *args: str, code: int = 0) -> Done:
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            returncode = main(list(args))
        done = Done(returncode, out.getvalue(), err.getvalue())
        assert done.returncode == code, (args, done)
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)


# The README's five-minute tour, run command by command as a newcomer would.
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
