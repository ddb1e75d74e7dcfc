import socket
import time
from collections.abc import Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float, alive: Callable[[], bool] = lambda: True) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"process died before listening on 127.0.0.1:{port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def port_taken(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something else listens on (or holds) host:port.

    SO_REUSEADDR as the servers themselves set it, so a port whose last
    connections linger in TIME_WAIT after a stop counts as free.
    """
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False
