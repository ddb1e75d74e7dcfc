"""`sumi serve gateway`: the HTTP gateway under uvicorn, on SUMI_HTTP_HOST:SUMI_HTTP_PORT.

HTTP is parsed by httptools (issue 41): past capacity most requests are refused before their
body is read, and what a refusal costs is nearly all the server's (accepting the connection,
parsing the request, writing the answer). One uvicorn process refusing creates spent 470-575 µs
of CPU per refusal with the pure-Python h11, 243-275 µs with httptools; on a saturated machine
that CPU is what every refusal, and every other request, waits for. Named, not left to uvicorn's
"auto": a Host installed without it fails at its start instead of serving at half the rate.
"""

import uvicorn

from sumi.core.config import Settings
from sumi.gateway._app import create_app
from sumi.gateway._server import Server

HTTP = "httptools"


def config(settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(settings), host=settings.http_host, port=settings.http_port, http=HTTP, log_level="warning"
    )


async def serve(settings: Settings) -> None:
    server = Server(config(settings))  # no 100 ms tick while idle (issue 40)
    await server.serve()
    if not server.started:  # as uvicorn.run: a gateway that could not listen fails, and is restarted
        raise SystemExit(3)
