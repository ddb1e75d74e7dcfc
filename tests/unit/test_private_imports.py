"""No package imports another's private module (issue 42): a package offers what others may use
in its `__init__` or in a module without a leading underscore, so its private modules can be
split, renamed or rewritten without a change reaching past it. A package is `sumi.<name>`
(the host's own top-level modules are `sumi`'s) or `sumi_projections`."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts[1:]  # under services/ or projections/
    return ".".join(p for p in parts if p != "__init__")


def package_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "sumi" or len(parts) < 2 or parts[1].startswith("_"):
        return parts[0]
    return ".".join(parts[:2])


def imported(tree: ast.AST) -> list[str]:
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def private_owner(name: str) -> str | None:
    """The module whose private part `name` reaches into, or None."""
    parts = name.split(".")
    if parts[0] not in ("sumi", "sumi_projections"):
        return None
    for i, part in enumerate(parts[1:], 1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def test_no_package_imports_another_packages_private_module() -> None:
    # Not a requirement of the Forms: a rule of the house (issue 42), so no requirement ID.
    reaches = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for folder in ("services", "projections")
        for path in (ROOT / folder).rglob("*.py")
        for name in imported(ast.parse(path.read_text()))
        if (owner := private_owner(name)) is not None
        and package_of(owner) != package_of(module_of(path))
        and not module_of(path).startswith(owner + ".")
    )
    assert reaches == [], "offer it in the package's __init__ or a public module: " + "; ".join(reaches)


def test_the_rule_sees_a_reach_into_another_package() -> None:
    assert private_owner("sumi.workflow._documents.is_name") == "sumi.workflow"
    assert package_of("sumi.gateway._workflows") != package_of("sumi.workflow")
    assert package_of("sumi.control.rules.forms") == package_of("sumi.control.rules._decide")
    assert private_owner("sumi.workflow.replies.DECIDED_FP") is None
