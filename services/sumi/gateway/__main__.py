"""`python -m sumi.gateway`: serve the gateway on SUMI_HTTP_HOST:SUMI_HTTP_PORT."""

import uvicorn

from sumi.core.config import Settings
from sumi.gateway import create_app


def main() -> None:
    settings = Settings.from_env()
    uvicorn.run(create_app(settings), host=settings.http_host, port=settings.http_port, log_level="warning")


if __name__ == "__main__":
    main()
