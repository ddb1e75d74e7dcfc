"""The test tree is a package mirroring the source: kits are imported, never put on sys.path; and
every suite that needs the real broker and database says so with the `integration` marker."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# The suites whose tests start a Host, a broker or a database (tests/conftest.py).
REAL_PARTS = ("integration", "conformance", "chaos", "examples", "load")


def _sys_path_edits(path: Path) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]


def test_no_test_module_edits_sys_path() -> None:
    modules = sorted(TESTS.rglob("*.py"))
    assert len(modules) > 20
    found = {str(p.relative_to(TESTS)): lines for p in modules if (lines := _sys_path_edits(p))}
    assert found == {}, "import kits as tests.… packages instead"


def test_every_test_folder_is_a_package() -> None:
    folders = {p.parent for p in TESTS.rglob("*.py")}
    assert sorted(str(f.relative_to(TESTS.parent)) for f in folders if not (f / "__init__.py").exists()) == []


def test_the_check_sees_a_sys_path_edit(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import sys\nsys.path.insert(0, 'x')\n")
    assert _sys_path_edits(module) == [2]


def _marked_integration(path: Path) -> bool:
    """Whether the module sets `pytestmark` to pytest.mark.integration, alone or in a list."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            return any(ast.unparse(m) == "pytest.mark.integration" for m in marks)
    return False


def test_every_suite_on_real_parts_is_marked_integration() -> None:
    # `-m integration` (and `-m "not integration"`) must pick exactly the tests that need a broker.
    modules = sorted(p for suite in REAL_PARTS for p in (TESTS / suite).rglob("test_*.py"))
    assert len(modules) > 50
    assert [str(p.relative_to(TESTS)) for p in modules if not _marked_integration(p)] == []


def test_the_check_sees_a_missing_marker(tmp_path: Path) -> None:
    module = tmp_path / "test_m.py"
    module.write_text("import pytest\n\npytestmark = [pytest.mark.integration, pytest.mark.timeout(9)]\n")
    assert _marked_integration(module)
    module.write_text("import pytest\n\npytestmark = pytest.mark.timeout(9)\n")
    assert not _marked_integration(module)
