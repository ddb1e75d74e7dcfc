"""`sumi logs WORKER`: a worker's lines over HTTP, and with `--follow` as they come (`wrangler tail`)."""

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Annotated, Any, TextIO
from urllib.parse import quote

import httpx
import typer

from sumi.cli._state import globals_of
from sumi.core.logline import format_line


def register(app: typer.Typer) -> None:
    app.command(name="logs", help="A worker's log lines; with --follow, as they come (like `wrangler tail`).")(
        logs_command
    )


def logs_command(
    ctx: typer.Context,
    worker: Annotated[str, typer.Argument(help="the ModuleWorker's name or UID")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing lines as they come")] = False,
    instance: Annotated[str | None, typer.Option(help="only the lines of this workflow instance")] = None,
    level: Annotated[str | None, typer.Option(help="this level and above: debug, info, warn, error")] = None,
    since: Annotated[str | None, typer.Option(help="an RFC 3339 time, e.g. 2026-12-02T06:00:00Z")] = None,
    limit: Annotated[int, typer.Option(help="at most this many lines (without --follow)")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line, as the API answers")] = False,
) -> int:
    target = globals_of(ctx).target()
    args = argparse.Namespace(
        worker=worker,
        space=target.need_space(),
        follow=follow,
        instance=instance,
        level=level,
        since=since,
        limit=limit,
        json=as_json,
        url=target.url,
        token=target.need_token(),
    )
    return logs(args)


def logs(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    params = {k: v for k in ("instance", "level", "since") if (v := getattr(args, k)) is not None}
    path = f"/v2/spaces/{quote(args.space, safe='')}/workers/{quote(args.worker, safe='')}/logs"
    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    try:
        with httpx.Client(base_url=args.url, headers=headers, timeout=httpx.Timeout(30, read=None)) as client:
            if not args.follow:
                r = client.get(path, params={**params, "limit": args.limit})
                if r.status_code != 200:
                    return _failed(r.status_code, r.text)
                for entry in r.json()["items"]:
                    _print(entry, args.json, out)
                return 0
            with client.stream("GET", path, params={**params, "follow": "true"}) as r:
                if r.status_code != 200:
                    return _failed(r.status_code, r.read().decode())
                for entry in _events(r.iter_lines()):
                    _print(entry, args.json, out)
    except KeyboardInterrupt:
        return 0
    except httpx.HTTPError as exc:
        print(f"sumi logs: {exc}", file=sys.stderr)
        return 1
    return 0


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The `data:` of each Server-Sent Event (comments and event names skipped)."""
    for line in lines:
        if line.startswith("data:"):
            yield json.loads(line[5:])


def _print(entry: dict[str, Any], as_json: bool, out: TextIO) -> None:
    out.write((json.dumps(entry, ensure_ascii=False) if as_json else format_line(entry)) + "\n")
    out.flush()


def _failed(status: int, body: str) -> int:
    print(f"sumi logs: HTTP {status}: {body}", file=sys.stderr)
    return 1
