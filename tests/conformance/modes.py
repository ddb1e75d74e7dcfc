"""The workflow engine's two modes, each a Host the workflow conformance tests run against.

A module runs every test twice by importing `engine_mode_host` (it overrides `host`):
`[normal]` on the session's Host, `[always-replay]` on a Host whose workflow engine ends
the execution context after every committed step (SUMI_WORKFLOW_ALWAYS_REPLAY=1), so every
step after the first is reached by replay (WF-32, WF-36). The second Host
(`always_replay_host`, conftest.py) is started once for the conformance package, and only
when a test asks for it.
"""

import pytest

from tests.hostkit import Host

MODES = ("normal", "always-replay")
ALWAYS_REPLAY = {"SUMI_WORKFLOW_ALWAYS_REPLAY": "1"}


@pytest.fixture(scope="package", params=MODES, name="host")
def engine_mode_host(request: pytest.FixtureRequest, host: Host) -> Host:
    """The session's Host (`normal`), or the always-replay one; the mode is in every test ID."""
    if request.param == "normal":
        return host
    replay: Host = request.getfixturevalue("always_replay_host")
    return replay
