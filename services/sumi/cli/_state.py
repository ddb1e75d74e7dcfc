"""The global options every command sees, wherever on the line they were given."""

from dataclasses import dataclass

import typer

from sumi.cli import _profile
from sumi.cli._client import Host

# Options that may stand anywhere on the line (kubectl's way): `sumi deploy DIR --space s`
# and `sumi --space s deploy DIR` mean the same. main() moves them to the front.
GLOBAL_OPTIONS = {"--url", "--token", "--space", "--context", "--output", "-o"}


@dataclass
class Globals:
    url: str | None = None
    token: str | None = None
    space: str | None = None
    context: str | None = None
    output: str = "table"

    def target(self) -> _profile.Target:
        return _profile.resolve(self.url, self.token, self.space, self.context)

    def host(self, space: bool = True) -> Host:
        t = self.target()
        return Host(t.url, t.need_token(), t.need_space() if space else t.space)


def hoist(argv: list[str]) -> list[str]:
    """The global options (and their values) first, everything else in its order."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i:]
            break
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            takes = "=" not in arg and i + 1 < len(argv)
            front += argv[i : i + 2] if takes else [arg]
            i += 2 if takes else 1
            continue
        rest.append(arg)
        i += 1
    return front + rest


def globals_of(ctx: typer.Context) -> Globals:
    g = ctx.find_root().obj
    assert isinstance(g, Globals)
    return g
