"""The gateway's server parses HTTP with httptools (issue 41): the cheaper parser is half of what a
refusal costs past capacity, so a Host without it must not start quietly on the slower one."""

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from sumi.core.config import Settings
from sumi.gateway.service import config


def test_the_gateway_parses_with_httptools() -> None:
    # WF-27: past capacity a write is refused in milliseconds; the parser is most of that refusal's cost.
    served = config(Settings("127.0.0.1:9", "postgresql://127.0.0.1:9/none"))
    served.load()
    assert served.http_protocol_class is HttpToolsProtocol
