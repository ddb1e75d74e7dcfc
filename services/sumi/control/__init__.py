"""The control processor: Spaces, tokens, Resources and Operations, decided from the log.

`sumi.control.rules.state` is the public fold of the control log that every service reads."""

from sumi.control.rules._decide import Decision, decide
from sumi.control.rules.state import ControlState, evolve

__all__ = ["ControlState", "Decision", "decide", "evolve"]
