"""The control processor: Spaces, tokens, Resources and Operations, decided from the log."""

from sumi.control._decide import Decision, decide
from sumi.control._state import ControlState, evolve

__all__ = ["ControlState", "Decision", "decide", "evolve"]
