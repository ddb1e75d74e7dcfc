"""The `sumi` command (Typer on Click, Rich for tables and progress): the Host itself
(`up`, `serve`, `bootstrap`), its Resources (`apply`, `get`, `list`, `delete`, `deploy`),
its data planes (`queue`, `instances`), administration (`space`, `token`, `login`,
`context`) and the audit (`replay`, `audit`). Exit codes: sumi.cli._errors."""

import sys

if sys.argv[1:2] == ["serve"]:  # before the imports below: a stop while they run is a clean exit
    from sumi.host.signals import exit_quietly_on_stop

    exit_quietly_on_stop()

from sumi.cli._app import app, main  # noqa: E402
from sumi.cli._apply import apply_files  # noqa: E402
from sumi.cli._client import Host  # noqa: E402
from sumi.cli._state import Globals  # noqa: E402

__all__ = ["Globals", "Host", "app", "apply_files", "main"]
