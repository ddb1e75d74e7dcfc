"""`python -m sumi.cli`: how the supervisor starts each service (same interpreter, same venv)."""

import sys

from sumi.cli import main

sys.exit(main())
