"""`sumi serve workflow`: the workflow engine."""

from sumi.core.config import Settings
from sumi.workflow.engine import Engine, warn_if_nonconformant


async def serve(settings: Settings) -> None:
    warn_if_nonconformant(settings)
    await Engine(settings).run()
