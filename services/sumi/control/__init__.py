"""The control processor: Spaces, tokens, Resources and Operations, decided from the log.

`sumi.control.state` is the public fold of the control log that every service reads."""

from sumi.control._decide import Decision, decide
from sumi.control.state import ControlState, evolve

__all__ = ["ControlState", "Decision", "decide", "evolve"]
