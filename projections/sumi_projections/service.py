"""`sumi serve projections`: every projection, and the pruning of what the read models no longer keep."""

import asyncio

from sumi.core.config import Settings
from sumi_projections import prune, run_all, runners


async def serve(settings: Settings) -> None:
    await asyncio.gather(run_all(runners(settings)), prune.every(settings))
