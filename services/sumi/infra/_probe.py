"""Health probes for the launched parts: does the server answer, not merely accept a connection.

A stopped (SIGSTOP) or wedged server still completes TCP handshakes from the kernel's
backlog, so a port check says nothing; each probe here waits for an answer of the
server's own protocol, within a timeout.
"""

import socket
import struct

API_VERSIONS = 18
CORRELATION = 0x5355_4D49  # any int32; the answer must carry it back


def kafka_answers(port: int, timeout: float = 3.0, host: str = "127.0.0.1") -> bool:
    """Whether the broker answers an ApiVersions (v0) request within `timeout`."""
    client = b"sumi-probe"
    request = struct.pack(">hhih", API_VERSIONS, 0, CORRELATION, len(client)) + client
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(request)) + request)
            head = _read(sock, 8)
    except OSError:
        return False
    return head is not None and struct.unpack(">ii", head)[1] == CORRELATION


def postgres_answers(url: str, timeout: float = 3.0) -> bool:
    """Whether the database runs a query within `timeout`."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=max(1, int(timeout))) as conn:
            conn.execute(f"SET statement_timeout = {int(timeout * 1000)}")
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _read(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data
