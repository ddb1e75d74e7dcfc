"""Settings are read once, in the entry modules, and handed down (issue 42): a module deep in
the Host that reads the environment itself sees settings its caller never gave it (a runtime
started with other walls than its engine's, a broker fetching into another cache). Only the
settings module and the entry points may read it: each `__main__`, the CLI, the supervisor
(which hands its children their environment) and the pytest plugin."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READS = re.compile(r"\bos\.environ\b|\bgetenv\(|\bSettings\.from_env\(|(?<!docker)\.from_env\(")
ENTRIES = ("services/sumi/core/config.py", "services/sumi/host/supervisor.py", "services/sumi/testing/plugin.py")


def allowed(rel: str) -> bool:
    return rel in ENTRIES or rel.endswith("/__main__.py") or rel.startswith("services/sumi/cli/")


def test_only_the_entry_modules_read_the_environment() -> None:
    # Not a requirement of the Forms: a rule of the house (issue 42), so no requirement ID.
    readers = sorted(
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("services", "projections")
        for path in (ROOT / folder).rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if READS.search(line) and not allowed(str(path.relative_to(ROOT)))
    )
    assert readers == [], "read the settings in an entry module and hand them down: " + ", ".join(readers)


def test_the_rule_finds_a_reader() -> None:
    assert READS.search("    x = os.environ.get('A')") and READS.search("Settings.from_env()")
    assert not READS.search("docker.from_env().ping()")
