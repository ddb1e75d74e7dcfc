"""The test tree is a package mirroring the source: kits are imported, never put on sys.path."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


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
