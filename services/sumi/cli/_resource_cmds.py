"""`sumi apply -f`, `get`, `list`, `delete`, `deploy`: Resources of a Space."""

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from sumi.cli import _apply, _check
from sumi.cli import deploy as _deploy
from sumi.cli._client import Host
from sumi.cli._errors import FAILED
from sumi.cli._kinds import KINDS, kind, of_form
from sumi.cli._output import note, show
from sumi.cli._state import globals_of

COLUMNS = ("kind", "name", "uid", "state", "generation", "updatedAt")
Files = Annotated[list[Path], typer.Option("--filename", "-f", help="a YAML or JSON manifest (repeatable)")]


def register(app: typer.Typer) -> None:
    app.command(help="Create or update every Resource of the manifests; a re-apply changes nothing.")(apply)
    app.command(help=f"One Resource by kind ({', '.join(KINDS)}) and name or UID.")(get)
    app.command("list", help="The Resources of the Space, of one kind or all.")(list_)
    app.command(help="Delete one Resource (KIND NAME), or every Resource of the manifests (-f), and wait.")(delete)
    app.command(help="Upload DIRECTORY as the worker's next Version and move its Deployment to it.")(deploy)


def apply(ctx: typer.Context, filename: Files) -> None:
    g = globals_of(ctx)
    outcomes = _apply.apply_files(g, filename)
    show(outcomes, g.output, ("kind", "name", "outcome", "uid", "operation"))


def get(
    ctx: typer.Context,
    kind_: Annotated[str, typer.Argument(metavar="KIND")],
    name: Annotated[str, typer.Argument(help="a name or a UID")],
) -> None:
    g = globals_of(ctx)
    kind(kind_)
    with g.host() as host:
        show(host.resource(name), g.output)


def list_(ctx: typer.Context, kind_: Annotated[str | None, typer.Argument(metavar="[KIND]")] = None) -> None:
    g = globals_of(ctx)
    with g.host() as host:
        items = host.resources(KINDS[kind(kind_)] if kind_ else None)
    show([{"kind": of_form(r["form"]), **r} for r in items], g.output, COLUMNS)


def delete(
    ctx: typer.Context,
    kind_: Annotated[str | None, typer.Argument(metavar="[KIND]")] = None,
    name: Annotated[str | None, typer.Argument(help="a name or a UID")] = None,
    filename: Files = [],  # noqa: B006  (Typer reads the default; it is never mutated)
) -> None:
    g = globals_of(ctx)
    if filename:
        show(_apply.delete_files(g, filename), g.output, ("kind", "name", "outcome", "operation"))
        return
    if not kind_ or not name:
        raise typer.BadParameter("name KIND and NAME, or give -f FILE")
    kind(kind_)
    with g.host() as host:
        resource = host.resource(name)
        op = host.delete(resource["uid"], f"{kind_} {resource['name']}")
    note(f"{of_form(resource['form'])}/{resource['name']} deleted (Operation {op['id']})")
    show(op, g.output)


def deploy(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="the worker's modules (and optional sumi.json)")],
    worker: Annotated[str, typer.Option(help="the ModuleWorker's name")],
    main: Annotated[str | None, typer.Option(help="the main module (default: worker.js / worker.py)")] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="deploy nothing: replay every live instance of the worker's workflows against this code"
            " (no effects) and list those that would fail with step_definition_mismatch",
        ),
    ] = False,
    checked: Annotated[
        bool,
        typer.Option(
            "--checked",
            help="the same check first; deploy only when no live instance would fail (else exit 1, nothing deployed)",
        ),
    ] = False,
) -> int:
    g = globals_of(ctx)
    with g.host() as host:
        if check or checked:
            failed = _check_only(directory, worker, host, main, g.output)
            if check or failed:
                return failed
        uid = _deploy.run(directory, worker, host, main)
    print(uid, flush=True)
    return 0


def _check_only(directory: Path, worker: str, host: Host, main: str | None, fmt: str) -> int:
    findings = _check.check(directory, worker, host, main)
    show([dataclasses.asdict(f) for f in findings], fmt, ("workflow", "instance", "outcome", "message"))
    failing = [f for f in findings if f.fails]
    note(f"deploy --check: {len(findings)} live instances replayed, {len(failing)} would fail")
    return FAILED if failing else 0
