"""`sumi queue send|stats|peek` and `sumi instances create|get|list|event|terminate|history`:
the two data planes (host-api.md §4, §5). A queue or workflow is named by name or UID."""

import base64
import json
import time
from typing import Annotated, Any
from urllib.parse import quote

import typer

from sumi.cli._errors import USAGE, CliError
from sumi.cli._output import show
from sumi.cli._state import globals_of

queue = typer.Typer(help="Send to, count and peek at a queue.", no_args_is_help=True)
instances = typer.Typer(help="Workflow instances: start, read, signal, stop.", no_args_is_help=True)
Key = Annotated[str | None, typer.Option("--idempotency-key", help="makes a retry return the first answer")]
TERMINAL = ("complete", "errored", "terminated")


def register(app: typer.Typer) -> None:
    app.add_typer(queue, name="queue")
    app.add_typer(instances, name="instances")


def _document(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise CliError(f"{what} is not JSON: {e}", USAGE) from e


@queue.command(help="Send messages (each BODY as UTF-8 text, or --base64).")
def send(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="the queue")],
    bodies: Annotated[list[str], typer.Argument(metavar="BODY...")],
    delay: Annotated[int | None, typer.Option("--delay", help="delaySeconds for every message")] = None,
    raw: Annotated[bool, typer.Option("--base64", help="each BODY is base64 already")] = False,
    key: Key = None,
) -> None:
    g = globals_of(ctx)
    messages = [
        {"body": b if raw else base64.b64encode(b.encode()).decode(), **({"delaySeconds": delay} if delay else {})}
        for b in bodies
    ]
    with g.host() as host:
        answer = host.write(
            "POST",
            f"{host.base()}/queues/{quote(name, safe='')}/messages",
            {"messages": messages},
            "sending",
            202,
            key=key,
        )
    show(answer if g.output != "table" else [{"messageId": m} for m in answer["messageIds"]], g.output)


@queue.command(help="The queue's counts: ready, delayed, inFlight, and since creation acknowledged, retried, …")
def stats(ctx: typer.Context, name: Annotated[str, typer.Argument(help="the queue")]) -> None:
    g = globals_of(ctx)
    with g.host() as host:
        show(host.ask("GET", f"{host.base()}/queues/{quote(name, safe='')}/stats", "reading the stats", 200), g.output)


@queue.command(help="The oldest messages, without delivering or changing anything.")
def peek(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="the queue")],
    state: Annotated[str | None, typer.Option(help="ready, delayed or inFlight")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    body: Annotated[bool, typer.Option("--body", help="with each body, decoded as UTF-8 where it is")] = False,
) -> None:
    g = globals_of(ctx)
    params: dict[str, Any] = {
        "limit": limit,
        **({"state": state} if state else {}),
        **({"includeBody": "true"} if body else {}),
    }
    with g.host() as host:
        items = host.ask("GET", f"{host.base()}/queues/{quote(name, safe='')}/messages", "peeking", 200, params=params)
    rows = [{**m, "body": _text(m["body"])} if "body" in m else m for m in items["items"]]
    show(rows, g.output, ("id", "state", "attempts", "size", "timestamp", *(("body",) if body else ())))


def _text(b64: str) -> str:
    raw = base64.b64decode(b64)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return b64


def _base(host: Any, workflow: str) -> str:
    return f"{host.base()}/workflows/{quote(workflow, safe='')}/instances"


@instances.command(help="Start an instance (PARAMS as JSON); --wait follows it to a terminal status.")
def create(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="the DurableWorkflow")],
    params: Annotated[str | None, typer.Option(help="a JSON document")] = None,
    id_: Annotated[str | None, typer.Option("--id", help="the instance ID (default: Host-issued)")] = None,
    wait: Annotated[float | None, typer.Option(help="seconds to wait for a terminal status")] = None,
    key: Key = None,
) -> None:
    g = globals_of(ctx)
    body = {**({"id": id_} if id_ else {}), **({"params": _document(params, "--params")} if params else {})}
    with g.host() as host:
        answer = host.write("POST", _base(host, workflow), body, "starting an instance", 201, key=key)
        if wait:
            answer = _await(host, workflow, answer["id"], wait)
    show(answer, g.output)


def _await(host: Any, workflow: str, instance: str, seconds: float) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        answer = host.ask("GET", f"{_base(host, workflow)}/{quote(instance, safe='')}", "reading the instance", 200)
        if answer["status"] in TERMINAL or time.monotonic() > deadline:
            return answer
        time.sleep(0.3)


@instances.command(help="One instance: status, output or error; --wait follows it to a terminal status.")
def get(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="the DurableWorkflow")],
    instance: Annotated[str, typer.Argument(help="the instance ID")],
    wait: Annotated[float | None, typer.Option(help="seconds to wait for a terminal status")] = None,
) -> None:
    g = globals_of(ctx)
    with g.host() as host:
        show(_await(host, workflow, instance, wait or 0), g.output)


@instances.command("list", help="The instances of a workflow, newest state first.")
def list_(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="the DurableWorkflow")],
    status: Annotated[str | None, typer.Option(help="only instances of this status")] = None,
) -> None:
    g = globals_of(ctx)
    with g.host() as host:
        items = host.pages(_base(host, workflow), "listing instances", {"status": status} if status else {})
    show(items, g.output, ("id", "status", "createdAt", "updatedAt"))


@instances.command(help="Send an event of TYPE (PAYLOAD as JSON) to an instance.")
def event(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="the DurableWorkflow")],
    instance: Annotated[str, typer.Argument(help="the instance ID")],
    type_: Annotated[str, typer.Argument(metavar="TYPE")],
    payload: Annotated[str | None, typer.Option(help="a JSON document")] = None,
    key: Key = None,
) -> None:
    g = globals_of(ctx)
    body = {"type": type_, **({"payload": _document(payload, "--payload")} if payload is not None else {})}
    with g.host() as host:
        path = f"{_base(host, workflow)}/{quote(instance, safe='')}/events"
        show(host.write("POST", path, body, "sending the event", 202, key=key), g.output)


@instances.command(help="Stop an instance; answers once its context has physically stopped.")
def terminate(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="the DurableWorkflow")],
    instance: Annotated[str, typer.Argument(help="the instance ID")],
) -> None:
    g = globals_of(ctx)
    with g.host() as host:
        path = f"{_base(host, workflow)}/{quote(instance, safe='')}/terminate"
        show(host.ask("POST", path, "terminating", 200), g.output)


@instances.command(help="The instance's own records in commit order (steps, sleeps, events, statuses).")
def history(
    ctx: typer.Context,
    workflow: Annotated[str, typer.Argument(help="the DurableWorkflow")],
    instance: Annotated[str, typer.Argument(help="the instance ID")],
) -> None:
    g = globals_of(ctx)
    with g.host() as host:
        items = host.ask("GET", f"{_base(host, workflow)}/{quote(instance, safe='')}/history", "reading history", 200)
    show(items["items"], g.output, ("seq", "type", "at", "data"))
