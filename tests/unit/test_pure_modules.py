"""The pure decision modules load without any I/O library, not even indirectly.

ruff's banned-api rule (pyproject.toml) stops a pure module importing aiokafka,
fastavro, psycopg or starlette itself; it cannot see `import sumi.wire.codec`, which
drags fastavro in. This test imports each pure module in a fresh interpreter and
looks at what got loaded, so an indirect import fails here.

Which modules are pure is written once, as the rule's pattern in pyproject.toml; this
test reads it, so a module added there is held here too.
"""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BANNED = {"aiokafka", "fastavro", "psycopg", "psycopg_pool", "starlette"}


def _pure_pattern() -> str:
    """The negated per-file pattern under which the banned imports are NOT ignored: the pure modules."""
    ignores = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]["per-file-ignores"]
    (pattern,) = [p for p, codes in ignores.items() if p.startswith("!") and "TID251" in codes]
    return str(pattern[1:])


def _alternatives(pattern: str) -> list[str]:
    """The plain globs a pattern's `{a,b}` alternatives (nested ones too) stand for."""
    start = pattern.find("{")
    if start < 0:
        return [pattern]
    depth, cut, parts = 0, start + 1, []
    for end in range(start, len(pattern)):
        char = pattern[end]
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 1 and char == ",":
            parts.append(pattern[cut:end])
            cut = end + 1
        elif depth == 0:
            parts.append(pattern[cut:end])
            break
    head, tail = pattern[:start], pattern[end + 1 :]
    return [glob for part in parts for glob in _alternatives(head + part + tail)]


GLOBS = _alternatives(_pure_pattern())
PURE = sorted({path for glob in GLOBS for path in ROOT.glob(glob)})


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts[1:]  # below services/ or projections/
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_pure_modules_are_found() -> None:
    names = {_module(p) for p in PURE}
    assert {"sumi.control.rules._decide", "sumi.control.rules.state", "sumi.queue.rules._decide"} <= names
    assert {"sumi.queue.rules._state", "sumi.queue.rules._batching", "sumi.control.rules.forms"} <= names
    assert {"sumi.control.rules.forms.queue_consumer", "sumi.core.records", "sumi.core.commands"} <= names


def test_every_glob_of_the_pattern_names_a_module() -> None:
    # A module renamed or moved must not silently leave the list.
    assert [glob for glob in GLOBS if not any(ROOT.glob(glob))] == []


def test_the_pattern_is_read_with_its_nested_alternatives() -> None:
    assert _alternatives("s/{a/{b,c}.py,d/*.py}") == ["s/a/b.py", "s/a/c.py", "s/d/*.py"]


def _loaded_by(module: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after importing module."""
    probe = f"import json, sys; import {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("path", PURE, ids=_module)
def test_a_pure_module_loads_no_io_library(path: Path) -> None:
    assert _loaded_by(_module(path)) & BANNED == set()


def test_the_probe_sees_an_indirect_import() -> None:
    # The check itself can fail: sumi.wire.codec is not pure, and it loads fastavro.
    assert "fastavro" in _loaded_by("sumi.wire.codec")
