"""`sumi up`, `sumi serve NAME`, `sumi bootstrap`: the Host itself, on this machine."""

import asyncio
import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from sumi.cli import _profile
from sumi.cli._errors import USAGE, CliError
from sumi.core.config import Settings, SettingsError
from sumi.host.services import BACKGROUND, SERVICE_ENTRIES


def settings() -> Settings:
    """A Host refuses settings it could not serve conformantly, before anything starts."""
    try:
        return Settings.from_env()
    except SettingsError as e:
        raise CliError(str(e), USAGE) from e


def register(app: typer.Typer) -> None:
    app.command(help="Start Kafka, Postgres and every service; Ctrl-C stops them all. Writes the `local` context.")(up)
    app.command(help=f"Run one service in the foreground: {', '.join(SERVICE_ENTRIES)}.")(serve)
    app.command(
        help="Create topics and read models and issue the admin token (what `up` does first; for compose and clusters)."
    )(bootstrap)


def up(
    logs: Annotated[bool, typer.Option("--logs", help="print every worker's log lines as they come")] = False,
) -> int:
    first = settings()
    from sumi.host.up import up as run_up

    write_local_profile()
    return run_up(first, logs)


def write_local_profile() -> None:
    """The `local` context, so the next command just works: the URL `up` serves and its token file.

    Written before the Host starts: both are known from the same variables `up` reads, and the
    token file is read by each command when it runs, by which time `up` has written it."""
    config = settings()
    host = config.http_host
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{config.http_port}"
    state = Path(config.state_dir).resolve()
    values = {"url": url}
    if config.admin_token:
        values["token"] = config.admin_token
    else:
        values["token-file"] = str(Path(config.admin_token_file or state / "admin-token").resolve())
    try:
        kept = (_profile.load().get("contexts") or {}).get("local", {})
        _profile.set_context("local", {**({"space": kept["space"]} if "space" in kept else {}), **values})
    except (OSError, CliError) as e:  # a read-only or broken profile must not stop the Host
        print(f"sumi: the profile was not written ({e})", flush=True)


def serve(service: Annotated[str, typer.Argument(help="the service to run")]) -> int:
    if service not in SERVICE_ENTRIES:
        raise CliError(f"no service {service!r} (one of {', '.join(SERVICE_ENTRIES)})", USAGE)
    import importlib

    from sumi.core.allocator import cap_arenas, settle_collector
    from sumi.host.signals import exit_quietly_on_stop, run_until_stopped
    from sumi.infra.lifeline import ENV as LIFELINE_ENV
    from sumi.infra.lifeline import hold_if_asked

    config = settings()
    # Started by `sumi up`: die with it. Popped, so nothing this service starts inherits it.
    hold_if_asked(os.environ.pop(LIFELINE_ENV, None))
    cap_arenas()
    if service in BACKGROUND and config.background_nice > 0:
        os.nice(config.background_nice)  # its runtime processes inherit it
    entry = importlib.import_module(SERVICE_ENTRIES[service])
    settle_collector()  # after the imports: they are most of what the collector would walk
    if service == "gateway":
        # While it serves, uvicorn stops gracefully on SIGINT and SIGTERM, then raises the signal again
        # with the handler it found: exit_quietly_on_stop's, so a stop exits 0 (before it serves, at
        # once). A closed terminal (SIGHUP) means the same as SIGTERM.
        exit_quietly_on_stop()
        signal.signal(signal.SIGHUP, lambda s, f: signal.raise_signal(signal.SIGTERM))
        asyncio.run(entry.serve(config))
        return 0
    from sumi.host.bootstrap import prepare
    from sumi.host.replica import Clash, named
    from sumi.wire.outbox import end_process_on_failure

    end_process_on_failure(15.0)  # a failed commit ends the process, its close bounded (the supervisor restarts it)

    async def run() -> None:
        async with named(config, service):  # before anything else: a refused copy touches nothing
            await prepare(config)
            await entry.serve(config)

    try:
        asyncio.run(run_until_stopped(run()))
    except Clash as e:
        raise CliError(str(e), USAGE) from None
    return 0


def bootstrap() -> int:
    from sumi.host.bootstrap import admin_token, issue_admin_token, prepare

    config = settings()
    asyncio.run(prepare(config))
    state = Path(config.state_dir)
    token, new = admin_token(config, config.admin_token or None, Path(config.admin_token_file or state / "admin-token"))
    asyncio.run(issue_admin_token(config, token, timeout=120))
    print(f"sumi: admin token {token}" if new else "sumi: admin token issued")
    return 0
