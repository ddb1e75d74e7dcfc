import os
from pathlib import Path


def cache_dir() -> Path:
    """Where fetched artefacts live between runs (SUMI_CACHE_DIR, else XDG cache)."""
    root = os.environ.get("SUMI_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sumi"
    )
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
