"""Past capacity the front door still gets a core: the services that work through a backlog run
at a lower CPU priority than the gateway (issue 41), their runtime processes with them."""

import os

import psutil
import pytest

from sumi.host.services import BACKGROUND
from tests.hostkit import Host

pytestmark = pytest.mark.integration


def test_the_backlog_services_yield_the_cpu_to_the_gateway(host: Host) -> None:
    # WF-27: a write past the bound is refused at once (backend_unavailable, Retry-After), which
    # needs the gateway scheduled first when the engines and their runtimes fill the cores
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    nice = {name: psutil.Process(proc.pid).nice() for name, proc in host.supervisor.procs.items()}
    lower = min(ours + host.settings.background_nice, 19)
    assert host.settings.background_nice > 0 and BACKGROUND <= set(nice)
    assert {name: nice[name] for name in BACKGROUND} == dict.fromkeys(BACKGROUND, lower), nice
    assert nice["gateway"] == nice["control"] == ours, nice
    for name in BACKGROUND:  # a runtime a backlog service started is no higher than it
        for child in psutil.Process(host.supervisor.procs[name].pid).children(recursive=True):
            assert child.nice() >= lower, (name, child.cmdline())
