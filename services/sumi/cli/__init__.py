"""The `sumi` command (Typer on Click, Rich for tables and progress): the Host itself
(`up`, `serve`, `bootstrap`), its Resources (`apply`, `get`, `list`, `delete`, `deploy`),
its data planes (`queue`, `instances`), administration (`space`, `token`, `login`,
`context`) and the audit (`replay`, `audit`). Exit codes: sumi.cli._errors."""

from sumi.cli._app import app, main

__all__ = ["app", "main"]
