"""The pure decision modules load without any I/O library, not even indirectly.

ruff's banned-api rule (pyproject.toml) stops a pure module importing aiokafka,
fastavro, psycopg or starlette itself; it cannot see `import sumi.core.codec`, which
drags fastavro in. This test imports each pure module in a fresh interpreter and
looks at what got loaded, so an indirect import fails here.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sumi

PACKAGE = Path(sumi.__file__).parent
# The same modules as the ruff rule's pattern in pyproject.toml: a decision, a fold,
# the batch planner and the Forms' validators.
PURE = sorted(
    {
        *PACKAGE.glob("*/_decide.py"),
        *PACKAGE.glob("*/_state.py"),
        PACKAGE / "workflow" / "_keys.py",  # which data keys a record makes and destroys
        PACKAGE / "control" / "state.py",
        PACKAGE / "core" / "commands.py",  # the typed commands the decisions read
        PACKAGE / "core" / "canonical.py",
        PACKAGE / "queue" / "_batching.py",
        PACKAGE / "queue" / "_memory.py",  # the bounds of the queue state
        *PACKAGE.glob("control/forms/*.py"),
    }
)
BANNED = {"aiokafka", "fastavro", "psycopg", "psycopg_pool", "starlette"}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_pure_modules_are_found() -> None:
    names = {_module(p) for p in PURE}
    assert {"sumi.control._decide", "sumi.control.state", "sumi.queue._decide", "sumi.queue._state"} <= names
    assert {"sumi.queue._batching", "sumi.control.forms", "sumi.control.forms.queue_consumer"} <= names


def _loaded_by(module: str) -> set[str]:
    """The top-level packages a fresh interpreter holds after importing module."""
    probe = f"import json, sys; import {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("path", PURE, ids=_module)
def test_a_pure_module_loads_no_io_library(path: Path) -> None:
    assert _loaded_by(_module(path)) & BANNED == set()


def test_the_probe_sees_an_indirect_import() -> None:
    # The check itself can fail: sumi.core.codec is not pure, and it loads fastavro.
    assert "fastavro" in _loaded_by("sumi.core.codec")
