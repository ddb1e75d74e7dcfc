"""The `sumi` command: `up` (the whole Host), `serve NAME` (one service), `replay` (the audit)."""

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from pathlib import Path

from sumi.core.config import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sumi")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="start Kafka, Postgres and every service; Ctrl-C stops them all")
    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=list(SERVICE_ENTRIES))
    deploy = sub.add_parser(
        "deploy", help="upload a directory of modules as a new WorkerVersion and move the worker's Deployment to it"
    )
    deploy.add_argument("directory")
    deploy.add_argument("--worker", required=True)
    deploy.add_argument("--space", required=True)
    deploy.add_argument("--url", default=os.environ.get("SUMI_URL", "http://127.0.0.1:8080"))
    deploy.add_argument("--token", default=os.environ.get("SUMI_TOKEN"))
    deploy.add_argument("--main", default=None, help="the main module (default: worker.js / worker.py)")
    sub.add_parser(
        "bootstrap",
        help="create topics and read models and issue the admin token (what `up` does first; for compose and clusters)",
    )
    replay = sub.add_parser(
        "replay", help="rebuild the read models from the topics into a fresh schema and compare them with the live one"
    )
    replay.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("SUMI_LOG_LEVEL", "WARNING"), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    if args.command == "up":
        return _up()
    if args.command == "serve":
        return _serve(args.service)
    if args.command == "bootstrap":
        return _bootstrap_only()
    if args.command == "deploy":
        from sumi.deploy import deploy as run_deploy

        return run_deploy(args)
    if args.command == "replay":
        from sumi.audit import replay_and_compare

        differences = asyncio.run(replay_and_compare(Settings.from_env(), args.timeout))
        for line in differences:
            print(line)
        print("replay: identical" if not differences else f"replay: {len(differences)} differences")
        return 0 if not differences else 1
    return 2


# Each service is `async def serve(settings)` in its module; the gateway is uvicorn's.
SERVICE_ENTRIES = {
    "control": "sumi.control._processor",
    "projections": "sumi_projections",
    "gateway": "sumi.gateway",
    "verifier": "sumi.runtime.verifier",
    "queue": "sumi.queue.engine",
    "workflow": "sumi.workflow.engine",
}


def _serve(service: str) -> int:
    import importlib

    settings = Settings.from_env()
    if service == "gateway":
        import uvicorn

        from sumi.gateway import create_app

        uvicorn.run(create_app(settings), host=settings.http_host, port=settings.http_port, log_level="warning")
        return 0
    from sumi._bootstrap import prepare

    async def run() -> None:
        await prepare(settings)
        await importlib.import_module(SERVICE_ENTRIES[service]).serve(settings)

    asyncio.run(run())
    return 0


def _bootstrap_only() -> int:
    from sumi._bootstrap import admin_token, issue_admin_token, prepare

    settings = Settings.from_env()
    asyncio.run(prepare(settings))
    state = Path(settings.state_dir)
    token, new = admin_token(
        settings,
        os.environ.get("SUMI_ADMIN_TOKEN"),
        Path(os.environ.get("SUMI_ADMIN_TOKEN_FILE", state / "admin-token")),
    )
    asyncio.run(issue_admin_token(settings, token, timeout=120))
    print(f"sumi: admin token {token}" if new else "sumi: admin token issued")
    return 0


def _up() -> int:
    from sumi._bootstrap import admin_token, issue_admin_token, prepare
    from sumi.infra import KafkaBroker, PostgresServer
    from sumi.supervisor import Supervisor

    started = time.monotonic()
    state = Path(os.environ.get("SUMI_STATE_DIR", ".sumi")).resolve()
    parts: list[KafkaBroker | PostgresServer] = []
    env: dict[str, str] = {}
    try:
        if "SUMI_KAFKA_BOOTSTRAP" not in os.environ:
            print("sumi: starting Apache Kafka (KRaft, single node)…", flush=True)
            broker = KafkaBroker(state / "kafka", port=int(os.environ.get("SUMI_KAFKA_PORT", "9092")))
            parts.append(broker.start())
            env["SUMI_KAFKA_BOOTSTRAP"] = broker.bootstrap
        if "SUMI_DATABASE_URL" not in os.environ:
            print("sumi: starting PostgreSQL…", flush=True)
            pg = PostgresServer(state / "postgres", port=int(os.environ.get("SUMI_PG_PORT", "5432")))
            parts.append(pg.start())
            env["SUMI_DATABASE_URL"] = pg.url
        os.environ.update(env)
        settings = Settings.from_env()
        asyncio.run(prepare(settings))
        token, new = admin_token(
            settings,
            os.environ.get("SUMI_ADMIN_TOKEN"),
            Path(os.environ.get("SUMI_ADMIN_TOKEN_FILE", state / "admin-token")),
        )
        supervisor = Supervisor(settings, env).start()
        try:
            asyncio.run(issue_admin_token(settings, token))
            supervisor.wait_ready()
            print(f"sumi: ready in {time.monotonic() - started:.1f}s at {supervisor.url}")
            print(f"sumi: admin token {token}" + (" (new; also written to the token file)" if new else ""))
            print("sumi: Ctrl-C stops everything", flush=True)
            _wait_for_signal()
        finally:
            print("sumi: stopping…", flush=True)
            supervisor.stop()
    finally:
        for part in reversed(parts):
            part.stop()
    return 0


def _wait_for_signal() -> None:
    got = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda s, f: got.append(s))
    while not got:
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
