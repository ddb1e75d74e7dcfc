"""`python -m sumi.infra`: fetch the broker's jars into the cache, and print where they are.

The entry point of the package rather than of `_kafka`, which the package imports: runpy
warns when the module it is asked to run as `__main__` was already imported under its name.
"""

import os

from sumi.core.config import Settings
from sumi.infra._kafka import ensure_jars

print(ensure_jars(Settings.from_env().cache_dir), flush=True)  # os._exit flushes nothing
os._exit(0)
