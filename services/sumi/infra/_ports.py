import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

LOWEST = 10_000  # below: the ports people give their own services


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel gives outgoing connections (Linux's default where it cannot be read)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A port free to listen on now, outside the range outgoing connections take their local
    ports from: a port the kernel handed out for listening (bind to 0) comes from that range, and
    between this answer and the listener's bind, any of the Host's hundreds of client connections
    may take it (seen once: a gateway that could not bind, its Up never ready)."""
    low, high = ephemeral_range()
    candidates = [p for p in range(LOWEST, 65536) if not low <= p <= high]
    for port in random.sample(candidates, min(200, len(candidates))):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every such port taken: the kernel's choice
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
