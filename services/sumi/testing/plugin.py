"""The pytest plugin (entry point `pytest11`): fixtures named `sumi_*`, started only when asked for."""

from collections.abc import Iterator

import pytest

from sumi.core.config import Settings
from sumi.testing._host import Host, new_settings, running_host
from sumi.testing._infra import database_url, kafka_bootstrap
from sumi.testing._space import Space, new_space


@pytest.fixture(scope="session")
def sumi_settings() -> Settings:
    """The session's settings, read from the environment once: the plugin is an entry point."""
    return Settings.from_env()


@pytest.fixture(scope="session")
def sumi_kafka_bootstrap(sumi_settings: Settings) -> Iterator[str]:
    with kafka_bootstrap(sumi_settings) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="session")
def sumi_database_url(sumi_settings: Settings) -> Iterator[str]:
    with database_url(sumi_settings) as url:
        yield url


@pytest.fixture(scope="session")
def sumi_host(sumi_kafka_bootstrap: str, sumi_database_url: str) -> Iterator[Host]:
    # The worker under test is the author's own code, so a machine without bubblewrap still
    # runs Python workers here (the walls guard a Host against code it did not write).
    settings = new_settings(sumi_kafka_bootstrap, sumi_database_url, allow_unwalled_python=True)
    with running_host(settings) as host:
        yield host


@pytest.fixture
def sumi_space(sumi_host: Host) -> Iterator[Space]:
    space = new_space(sumi_host)
    try:
        yield space
    finally:
        space.close()
