"""`sumi logs WORKER`: a worker's lines over HTTP, and with `--follow` as they come (`wrangler tail`)."""

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO
from urllib.parse import quote

import httpx

from sumi.core.logline import format_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("worker", help="the ModuleWorker's name or UID")
    parser.add_argument("--space", required=True)
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing lines as they come")
    parser.add_argument("--instance", help="only the lines of this workflow instance")
    parser.add_argument("--level", choices=("debug", "info", "warn", "error"), help="this level and above")
    parser.add_argument("--since", help="an RFC 3339 time, e.g. 2026-12-02T06:00:00Z")
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="one JSON object per line, as the API answers")
    parser.add_argument("--url", default=os.environ.get("SUMI_URL", "http://127.0.0.1:8080"))
    parser.add_argument("--token", default=os.environ.get("SUMI_TOKEN"))


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
