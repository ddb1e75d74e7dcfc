"""`sumi space …`, `sumi token …` (admin), and `sumi login` / `sumi context …` (the profile)."""

from typing import Annotated
from urllib.parse import quote

import typer

from sumi.cli import _profile
from sumi.cli._client import Host
from sumi.cli._errors import USAGE, CliError
from sumi.cli._output import note, show
from sumi.cli._state import globals_of

space = typer.Typer(help="Spaces (admin): create, list, delete.", no_args_is_help=True)
token = typer.Typer(help="Tokens (admin): create, list, revoke.", no_args_is_help=True)
context = typer.Typer(help="The contexts of the profile file: list, use.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(space, name="space")
    app.add_typer(token, name="token")
    app.add_typer(context, name="context")
    app.command(help="Save URL and token as a context of the profile file (and make it current), once they work.")(
        login
    )


@space.command("create", help="Create a Space.")
def space_create(ctx: typer.Context, name: str) -> None:
    g = globals_of(ctx)
    with g.host(space=False) as host:
        show(host.ask("POST", "/v2/spaces", "creating the Space", 201, body={"name": name}), g.output)


@space.command("list", help="The Spaces the caller has a role in.")
def space_list(ctx: typer.Context) -> None:
    g = globals_of(ctx)
    with g.host(space=False) as host:
        show(host.ask("GET", "/v2/spaces", "listing Spaces", 200)["items"], g.output, ("name", "role", "createdAt"))


@space.command("delete", help="Delete an empty Space.")
def space_delete(ctx: typer.Context, name: str) -> None:
    g = globals_of(ctx)
    with g.host(space=False) as host:
        host.ask("DELETE", f"/v2/spaces/{quote(name, safe='')}", "deleting the Space", 204)
    note(f"space/{name} deleted")


@token.command("create", help="Issue a token to PRINCIPAL (shown once).")
def token_create(
    ctx: typer.Context,
    principal: str,
    editor: Annotated[list[str], typer.Option(help="a Space to edit (repeatable)")] = [],  # noqa: B006
    viewer: Annotated[list[str], typer.Option(help="a Space to view (repeatable)")] = [],  # noqa: B006
    admin: Annotated[bool, typer.Option(help="an admin token")] = False,
) -> None:
    g = globals_of(ctx)
    grants = [{"space": s, "role": "editor"} for s in editor] + [{"space": s, "role": "viewer"} for s in viewer]
    body = {"principal": principal, "grants": grants, "admin": admin}
    with g.host(space=False) as host:
        show(host.ask("POST", "/v2/tokens", "issuing the token", 201, body=body), g.output)


@token.command("list", help="The principals holding live tokens: admin, grants, how many tokens (never a token).")
def token_list(ctx: typer.Context) -> None:
    g = globals_of(ctx)
    with g.host(space=False) as host:
        items = host.ask("GET", "/v2/tokens", "listing principals", 200)["items"]
    if g.output == "table":
        for item in items:
            item["grants"] = ", ".join(f"{x['space']}:{x['role']}" for x in item["grants"]) or "-"
    show(items, g.output, ("principal", "admin", "tokens", "grants", "lastIssuedAt"))


@token.command("revoke", help="Revoke every token of PRINCIPAL, at once.")
def token_revoke(ctx: typer.Context, principal: str) -> None:
    g = globals_of(ctx)
    with g.host(space=False) as host:
        host.ask("DELETE", f"/v2/tokens/{quote(principal, safe='')}", "revoking", 204)
    note(f"tokens of {principal} revoked")


def login(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("--name", help="the context's name")] = "default",
) -> None:
    g = globals_of(ctx)
    t = g.target()
    with Host(t.url, t.need_token()) as host:  # the token must work before it is saved
        host.ask("GET", "/v2/spaces", "checking the token", 200)
    path = _profile.set_context(name, {"url": t.url, "token": t.need_token(), "space": t.space or ""})
    note(f"context {name} saved in {path} and made current")


@context.command("list", help="The profile's contexts (the current one marked).")
def context_list(ctx: typer.Context) -> None:
    g = globals_of(ctx)
    known = _profile.profile()
    rows = [
        {"current": "*" if n == known.current else "", "name": n, "url": c.url, "space": c.space}
        for n, c in known.contexts.items()
    ]
    show(rows, g.output, ("current", "name", "url", "space"))


@context.command("use", help="Make NAME the current context; --space sets its Space too.")
def context_use(ctx: typer.Context, name: str) -> None:
    g = globals_of(ctx)
    data = _profile.load()
    contexts = data.get("contexts") or {}
    if name not in contexts:
        raise CliError(f"no context {name!r} in {_profile.path()}", USAGE)
    _profile.set_context(name, {**contexts[name], **({"space": g.space} if g.space else {})})
    note(f"context {name} is current")
