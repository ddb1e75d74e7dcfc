"""`sumi serve gateway`: the HTTP gateway under uvicorn, on SUMI_HTTP_HOST:SUMI_HTTP_PORT."""

import uvicorn

from sumi.core.config import Settings
from sumi.gateway._app import create_app


async def serve(settings: Settings) -> None:
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host=settings.http_host, port=settings.http_port, log_level="warning"))
    await server.serve()
    if not server.started:  # as uvicorn.run: a gateway that could not listen fails, and is restarted
        raise SystemExit(3)
