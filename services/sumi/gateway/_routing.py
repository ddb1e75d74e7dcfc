"""One Route per path with an endpoint per method, so a 405 lists every allowed method."""

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

Endpoint = Callable[[Request], Awaitable[Response]]


def route(path: str, **endpoints: Endpoint) -> Route:
    """`route("/x", GET=list_x, POST=create_x)`; HEAD is answered by GET, as Starlette does."""

    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await endpoints[method](request)

    dispatch.__name__ = "_".join(e.__name__ for e in endpoints.values())
    return Route(path, dispatch, methods=list(endpoints))
