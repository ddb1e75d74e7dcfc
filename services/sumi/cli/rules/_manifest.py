"""Manifests: YAML or JSON files of Resources, several per file, references by name.

```yaml
kind: queue            # or a Form's name (AtLeastOnceQueue) or `form: <URL>`
name: jobs
spec: {retentionSeconds: 3600}
---
kind: worker
name: greeter
source: .              # a directory of modules: applied as the worker's Version and Deployment
---
kind: consumer
name: greeter-jobs
spec: {queue: jobs, worker: greeter, deadLetterQueue: jobs-dead, maxBatchSize: 10, ...}
```

A reference (`queue`, `worker`, `deadLetterQueue`, `version`, `resource`) may be a name of
the Space; it is resolved to `{"resourceUid": …}` when applied. Pure: no I/O but reading files."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sumi.cli._errors import USAGE, CliError
from sumi.cli._kinds import KINDS, ORDER, kind

REFERENCE_KEYS = {"queue", "worker", "deadLetterQueue", "version", "resource"}
DOCUMENT_KEYS = {"kind", "form", "name", "space", "spec", "source"}


@dataclass(frozen=True)
class Item:
    kind: str
    name: str
    spec: dict[str, Any]
    space: str | None = None
    source: Path | None = None  # a worker's code
    where: str = field(default="", compare=False)

    @property
    def form(self) -> str:
        return KINDS[self.kind]


def load(paths: list[Path]) -> list[Item]:
    """Every document of every file, in creation order (a stable sort by kind)."""
    items = [item for p in paths for item in _file(p)]
    return sorted(items, key=lambda i: ORDER.index(i.kind))


def _file(path: Path) -> list[Item]:
    try:
        text = path.read_text(encoding="utf-8")
        docs = list(yaml.safe_load_all(text)) if path.suffix != ".json" else _json_docs(text)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise CliError(f"{path}: {e}", USAGE) from e
    return [_item(doc, f"{path}#{i}", path.parent) for i, doc in enumerate(docs) if doc is not None]


def _json_docs(text: str) -> list[Any]:
    value = json.loads(text)
    return value if isinstance(value, list) else [value]


def _item(doc: Any, where: str, base: Path) -> Item:
    if not isinstance(doc, dict):
        raise CliError(f"{where}: a document is an object with kind, name and spec", USAGE)
    unknown = sorted(set(doc) - DOCUMENT_KEYS)
    if unknown:
        raise CliError(
            f"{where}: unknown keys {', '.join(unknown)} (allowed: {', '.join(sorted(DOCUMENT_KEYS))})", USAGE
        )
    if "form" in doc:
        found = [k for k, f in KINDS.items() if f == doc["form"]]
        if not found:
            raise CliError(f"{where}: unsupported form {doc['form']!r}", USAGE)
        k = found[0]
    else:
        k = kind(str(doc.get("kind", "")))
    name, spec = doc.get("name"), doc.get("spec", {})
    if not isinstance(name, str) or not isinstance(spec, dict):
        raise CliError(f"{where}: name must be a string and spec an object", USAGE)
    source = doc.get("source")
    if source is not None and k != "worker":
        raise CliError(f"{where}: only a worker has a source directory", USAGE)
    return Item(k, name, spec, doc.get("space"), (base / source) if source is not None else None, where)


def resolve(value: Any, uid_of: Any, key: str = "") -> Any:
    """SPEC with every reference given by name replaced by `{"resourceUid": …}` (uid_of: name → uid)."""
    if isinstance(value, dict):
        return {k: resolve(v, uid_of, k) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, uid_of, key) for v in value]
    if key in REFERENCE_KEYS and isinstance(value, str):
        return {"resourceUid": value if "_" in value else uid_of(value)}
    return value
