"""The gateway's SQL lives in one module, its read side (sumi.gateway._reads)."""

import ast
import re
from pathlib import Path

import sumi.gateway

GATEWAY = Path(sumi.gateway.__file__).parent
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b.*\b(FROM|INTO|SET)\b|\bFROM\s+\w+\s+WHERE\b", re.S)
# Where a query may be run from: the read side, and the connection it runs on.
ALLOWED = {"_reads.py", "_backend.py"}


def _strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _queries(path: Path) -> list[str]:
    calls = [
        n.func.attr
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("fetchone", "fetchall")
    ]
    return calls + [s for s in _strings(path) if SQL.search(s)]


def test_no_sql_outside_the_read_side() -> None:
    modules = sorted(p for p in GATEWAY.glob("*.py") if p.name not in ALLOWED)
    assert len(modules) > 10
    assert {p.name: q for p in modules if (q := _queries(p))} == {}


def test_the_check_sees_sql() -> None:
    # It can fail: the read side itself is full of queries.
    assert len(_queries(GATEWAY / "_reads.py")) >= 10
