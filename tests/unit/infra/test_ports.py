"""sumi.infra.free_port: a port to listen on that no outgoing connection can take meanwhile.

No requirement ID applies: the requirements say what a Host answers, not how its launchers pick
ports; this holds the README's start and the tests' Hosts against a lost race for a port."""

import socket

from sumi.infra import free_port
from sumi.infra._ports import LOWEST, ephemeral_range


def test_a_free_port_lies_outside_the_range_outgoing_connections_use_and_can_be_listened_on() -> None:
    low, high = ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert all(LOWEST <= p < 65536 and not low <= p <= high for p in ports), sorted(ports)
    assert len(ports) > 1  # chosen at random: two Hosts starting at once do not race for one
    port = ports.pop()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_a_port_in_use_is_never_given() -> None:
    held = []
    try:
        for _ in range(20):
            s = socket.socket()
            s.bind(("127.0.0.1", free_port()))
            s.listen()
            held.append(s)
        taken = {s.getsockname()[1] for s in held}
        assert all(free_port() not in taken for _ in range(200))
    finally:
        for s in held:
            s.close()
