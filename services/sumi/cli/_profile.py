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
from dataclasses import dataclass
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
    data = load()
    name = context or os.environ.get("SUMI_CONTEXT") or data.get("current-context")
    ctx: dict[str, Any] = (data.get("contexts") or {}).get(name, {}) if name else {}
    if context and not ctx:
        raise CliError(f"no context {context!r} in {path()}", USAGE)
    token = token or os.environ.get("SUMI_TOKEN") or ctx.get("token") or _read(ctx.get("token-file"))
    return Target(
        url=url or os.environ.get("SUMI_URL") or ctx.get("url") or "http://127.0.0.1:8080",
        token=token,
        space=space or os.environ.get("SUMI_SPACE") or ctx.get("space"),
        context=name,
    )


def _read(file: str | None) -> str | None:
    if not file:
        return None
    try:
        return Path(file).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
