import os
from pathlib import Path


def cache_dir(root: str = "") -> Path:
    """Where fetched artefacts live between runs: `root` (Settings.cache_dir), else the XDG cache."""
    path = Path(root or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sumi"))
    path.mkdir(parents=True, exist_ok=True)
    return path
