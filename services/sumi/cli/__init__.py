"""The `sumi` command: `up` (the whole Host), `serve NAME` (one service), `replay` (the audit)."""

import argparse
import asyncio
import signal
import sys
from pathlib import Path

from sumi.core.config import Settings
from sumi.core.logs import configure as configure_logs
from sumi.services import SERVICE_ENTRIES


def main(argv: list[str] | None = None) -> int:
    try:
        defaults, refused = Settings.from_env(), None
    except ValueError as e:  # SettingsError, or a number that is none
        # `deploy` is a client and needs none of the Host's settings; the others stop below.
        defaults, refused = Settings(kafka_bootstrap="", database_url=""), e
    parser = argparse.ArgumentParser(prog="sumi")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start Kafka, Postgres and every service; Ctrl-C stops them all")
    up.add_argument("--logs", action="store_true", help="print every worker's log lines as they come")
    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=list(SERVICE_ENTRIES))
    deploy = sub.add_parser(
        "deploy", help="upload a directory of modules as a new WorkerVersion and move the worker's Deployment to it"
    )
    deploy.add_argument("directory")
    deploy.add_argument("--worker", required=True)
    deploy.add_argument("--space", required=True)
    deploy.add_argument("--url", default=defaults.deploy_url)
    deploy.add_argument("--token", default=defaults.deploy_token or None)
    deploy.add_argument("--main", default=None, help="the main module (default: worker.js / worker.py)")
    sub.add_parser(
        "bootstrap",
        help="create topics and read models and issue the admin token (what `up` does first; for compose and clusters)",
    )
    from sumi.cli.logs import add_arguments as logs_arguments

    logs_arguments(sub.add_parser("logs", help="print a worker's log lines; --follow keeps printing them"))
    replay = sub.add_parser(
        "replay", help="rebuild the read models from the topics into a fresh schema and compare them with the live one"
    )
    replay.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    configure_logs(defaults.log_format, defaults.log_level)
    if args.command == "logs":
        from sumi.cli.logs import logs

        return logs(args)
    if args.command != "deploy" and refused is not None:
        # A Host refuses settings it could not serve conformantly, before anything starts.
        print(f"sumi: {refused}", file=sys.stderr)
        return 2
    if args.command == "up":
        return _up(args.logs)
    if args.command == "serve":
        return _serve(args.service)
    if args.command == "bootstrap":
        return _bootstrap_only()
    if args.command == "deploy":
        from sumi.cli.deploy import deploy as run_deploy

        return run_deploy(args)
    if args.command == "replay":
        from sumi.audit import replay_and_compare

        audit = asyncio.run(replay_and_compare(Settings.from_env(), args.timeout))
        for line in audit.lines():
            print(line)
        verdict = "identical" if not audit.differences else f"{len(audit.differences)} differences"
        print(f"replay: {verdict}; {len(audit.quarantined)} records quarantined")
        return 0 if not audit.differences else 1
    return 2


def _serve(service: str) -> int:
    import importlib

    from sumi._lifeline import hold_if_asked
    from sumi._signals import run_until_stopped

    hold_if_asked()  # started by `sumi up`: die with it
    settings = Settings.from_env()
    if service == "gateway":
        import uvicorn

        from sumi.gateway import create_app

        # While it serves, uvicorn stops gracefully on SIGINT and SIGTERM, then raises the signal again
        # with the handler it found: this one, so a stop exits 0 (before it serves, at once). A closed
        # terminal (SIGHUP) means the same as SIGTERM.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _exit_quietly)
        signal.signal(signal.SIGHUP, lambda s, f: signal.raise_signal(signal.SIGTERM))
        # JSON lines: uvicorn's own loggers then go through the root handler (sumi.core.logs) too.
        from uvicorn.config import LOGGING_CONFIG

        uvicorn.run(
            create_app(settings),
            host=settings.http_host,
            port=settings.http_port,
            log_level="warning",
            log_config=None if settings.log_format == "json" else LOGGING_CONFIG,
        )
        return 0
    from sumi._bootstrap import prepare

    async def run() -> None:
        await prepare(settings)
        await importlib.import_module(SERVICE_ENTRIES[service]).serve(settings)

    asyncio.run(run_until_stopped(run()))
    return 0


def _exit_quietly(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _bootstrap_only() -> int:
    from sumi._bootstrap import admin_token, issue_admin_token, prepare

    settings = Settings.from_env()
    asyncio.run(prepare(settings))
    token, new = admin_token(settings, settings.admin_token or None, Path(settings.token_file()))
    asyncio.run(issue_admin_token(settings, token, timeout=120))
    print(f"sumi: admin token {token}" if new else "sumi: admin token issued")
    return 0


def _up(logs: bool = False) -> int:
    from sumi._up import up

    return up(logs)
