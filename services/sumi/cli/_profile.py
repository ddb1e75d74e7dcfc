"""The profile file, `$XDG_CONFIG_HOME/sumi/config.toml` (else `~/.config/sumi/config.toml`):
named contexts the way kubectl's kubeconfig and wrangler's config hold them.

```toml
current-context = "local"
[contexts.local]
url = "http://127.0.0.1:8080"
token-file = "/abs/path/.sumi/admin-token"   # or token = "sumi_…"
space = "demo"
```

`token-file` is what `sumi up` writes: the admin token stays in the one file the Host
already keeps (mode 0600), and the profile never holds a copy that could go stale."""

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from sumi.cli._errors import USAGE, CliError


def path() -> Path:
    if os.environ.get("SUMI_CONFIG"):
        return Path(os.environ["SUMI_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path(os.environ.get("HOME") or Path.home()) / ".config")
    return Path(base) / "sumi" / "config.toml"


def load() -> dict[str, Any]:
    p = path()
    if not p.is_file():
        return {}
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise CliError(f"{p}: not TOML: {e}", USAGE) from e


@dataclass(frozen=True)
class Context:
    """One named context: where commands go, as whom, and in which Space."""

    url: str | None = None
    token: str | None = None
    token_file: str | None = None
    space: str | None = None


@dataclass(frozen=True)
class Profile:
    current: str | None = None
    contexts: Mapping[str, Context] = field(default_factory=dict)


_KEYS = {"url": "url", "token": "token", "token-file": "token_file", "space": "space"}


def parse(data: Mapping[str, Any], where: Path | str) -> Profile:
    """The profile a file's TOML holds; a value of the wrong kind or a key we do not know is
    refused by its name, so a typo never quietly sends a command elsewhere."""

    def refuse(what: str) -> CliError:
        return CliError(f"{where}: {what}", USAGE)

    unknown = sorted(set(data) - {"current-context", "contexts"})
    if unknown:
        raise refuse(f"unknown key {unknown[0]!r}")
    current = data.get("current-context")
    if current is not None and not isinstance(current, str):
        raise refuse(f"current-context must be a string, not {current!r}")
    tables = data.get("contexts", {})
    if not isinstance(tables, dict):
        raise refuse(f"contexts must be a table, not {tables!r}")
    contexts: dict[str, Context] = {}
    for name, table in tables.items():
        if not isinstance(table, dict):
            raise refuse(f"contexts.{name} must be a table, not {table!r}")
        for key, value in table.items():
            if key not in _KEYS:
                raise refuse(f"contexts.{name}: unknown key {key!r}")
            if not isinstance(value, str):
                raise refuse(f"contexts.{name}.{key} must be a string, not {value!r}")
        contexts[name] = Context(**{_KEYS[k]: v for k, v in table.items()})
    return Profile(current, contexts)


def profile() -> Profile:
    return parse(load(), path())


def save(data: dict[str, Any]) -> Path:
    p = path()
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(tomli_w.dumps(data), encoding="utf-8")
    tmp.chmod(0o600)  # it may hold a token
    tmp.replace(p)
    return p


def set_context(name: str, values: dict[str, str], current: bool = True) -> Path:
    data = load()
    data.setdefault("contexts", {})[name] = {k: v for k, v in values.items() if v}
    if current:
        data["current-context"] = name
    return save(data)


@dataclass(frozen=True)
class Target:
    """Where a command goes and as whom: flags, then SUMI_* variables, then the profile's context."""

    url: str
    token: str | None
    space: str | None
    context: str | None

    def need_token(self) -> str:
        if not self.token:
            raise CliError("no token: pass --token, set SUMI_TOKEN, or run `sumi login` (or `sumi up`)", USAGE)
        return self.token

    def need_space(self) -> str:
        if not self.space:
            raise CliError("no Space: pass --space, set SUMI_SPACE, or set one in the context", USAGE)
        return self.space


def resolve(url: str | None, token: str | None, space: str | None, context: str | None) -> Target:
    known = profile()
    name = context or os.environ.get("SUMI_CONTEXT") or known.current
    ctx = known.contexts.get(name, Context()) if name else Context()
    if context and context not in known.contexts:
        raise CliError(f"no context {context!r} in {path()}", USAGE)
    token = token or os.environ.get("SUMI_TOKEN") or ctx.token or _read(ctx.token_file)
    return Target(
        url=url or os.environ.get("SUMI_URL") or ctx.url or "http://127.0.0.1:8080",
        token=token,
        space=space or os.environ.get("SUMI_SPACE") or ctx.space,
        context=name,
    )


def _read(file: str | None) -> str | None:
    if not file:
        return None
    try:
        return Path(file).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
