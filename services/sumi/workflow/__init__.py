"""The workflow engine: DurableWorkflow 0.3.0 instances over the instance log (WF-18..48).

`commands` holds the typed commands the gateway and the worker bindings submit;
`_state` (the fold of one instance) and `_decide` ((state, input) -> records) are
the pure core (no Kafka, no database); the engine service wraps them.
"""

from sumi.workflow._documents import MAX_DOCUMENT_BYTES, is_name

__all__ = ["MAX_DOCUMENT_BYTES", "is_name"]
