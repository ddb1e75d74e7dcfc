"""No import circles: no module reaches itself, and neither engine package imports the other,
not even indirectly.

The queue engine and the workflow engine share pieces (the outbox in sumi.core, the
`queue.send` check beside the control fold it reads in sumi.control, the runtime pool and
the engine shell in sumi.engines); the one module that needs
both, the queue service with the workflow client, sits above them (sumi.host.queue_service).
This reads the import statements of every module of the package (those inside
functions and under TYPE_CHECKING included) and follows them transitively, so an
import hidden in a function or behind a third module fails here too.
"""

import ast
from collections.abc import Callable
from functools import cache
from importlib.util import resolve_name
from pathlib import Path

import pytest

import sumi

PACKAGE = Path(sumi.__file__).parent


def _name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in PACKAGE.rglob("*.py")}


def _with_parents(module: str) -> set[str]:
    """Importing a.b.c runs a/__init__, a/b/__init__ and a/b/c."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & MODULES.keys()


@cache
def _direct(module: str) -> frozenset[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found |= _with_parents(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module or ""
            found |= _with_parents(base)
            for alias in node.names:
                found |= _with_parents(f"{base}.{alias.name}")
    return frozenset(found)


@cache
def _named(module: str) -> frozenset[str]:
    """What `module` imports, without its own package's __init__ and their parents: Python
    runs those around any import of the module, and naming them makes no circle of the code."""
    return frozenset(m for m in _direct(module) if not (module == m or module.startswith(m + ".")))


def reaches(module: str, edges: Callable[[str], frozenset[str]] = _direct) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += edges(m)
    return seen


def _inside(package: str) -> list[str]:
    return sorted(m for m in MODULES if m == package or m.startswith(package + "."))


@pytest.mark.parametrize(("package", "other"), [("sumi.workflow", "sumi.queue"), ("sumi.queue", "sumi.workflow")])
def test_an_engine_package_never_imports_the_other(package: str, other: str) -> None:
    for module in _inside(package):
        crossing = sorted(m for m in reaches(module) if m == other or m.startswith(other + "."))
        assert crossing == [], f"{module} imports {crossing}"


def test_no_module_imports_itself_through_others() -> None:
    circled = sorted(m for m in MODULES if any(m in reaches(n, _named) for n in _named(m)))
    assert circled == []


def test_the_shared_pieces_sit_below_both_engines() -> None:
    for module in _inside("sumi.engines") + ["sumi.wire.outbox"]:
        assert not any(m.startswith(("sumi.queue", "sumi.workflow")) for m in reaches(module)), module


def test_the_check_sees_an_indirect_import() -> None:
    # It can fail: the queue service reaches the workflow package through the client.
    assert "sumi.workflow.client" in reaches("sumi.host.queue_service")
    assert "sumi.workflow.rules._state" in reaches("sumi.host.queue_service")  # one module further
    assert "sumi.host._uplogs" in _direct("sumi.host.up")  # imported under TYPE_CHECKING
    assert "sumi.host.bootstrap" in _direct("sumi.cli._host_cmds")  # imported inside a function
    assert "sumi.runtime._jshost" in _direct("sumi.runtime")  # a relative import
