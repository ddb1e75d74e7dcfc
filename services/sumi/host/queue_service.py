"""The queue service: the queue engine with the workflow client its handlers' Caller Bindings use.

Put together here, above both engine packages, so that neither imports the other
(tests/unit/test_engine_imports.py).
"""

from sumi.core.config import Settings
from sumi.queue.engine import Engine
from sumi.workflow.client import WorkflowClient


async def serve(settings: Settings) -> None:
    await Engine(settings, WorkflowClient(settings)).run()
