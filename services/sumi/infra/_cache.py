from pathlib import Path

from sumi.core.config import default_cache_dir


def cache_dir(root: str = "") -> Path:
    """Where fetched artefacts live between runs: `root` (Settings.cache_dir), else the XDG cache."""
    path = Path(root or default_cache_dir())
    path.mkdir(parents=True, exist_ok=True)
    return path
