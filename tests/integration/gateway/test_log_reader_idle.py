"""The gateway's instance log reader sleeps while the log is quiet (issue 40, idle is idle).

Counted in the reader's polls that come back, not timed: it came back empty every second.
No requirement ID applies: the requirements say what a Host answers, not what it costs while
nothing happens; what the reader must keep doing (answering a decision) is WF-18's, tested
in test_log_decisions."""

import asyncio
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from sumi.gateway._decisions import Decisions
from sumi.gateway._logdecisions import LogDecisions
from sumi.gateway._lookups import Lookups
from sumi.testing import new_settings

pytestmark = pytest.mark.integration


async def _none(ids: list[str]) -> list[Any]:
    return []


async def test_an_idle_log_reader_does_not_come_back_empty(kafka_bootstrap: str, database_url: str) -> None:
    settings = new_settings(kafka_bootstrap, database_url)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(settings.topic("workflow"), 3, 1)])
    reader = LogDecisions(settings, Decisions(settings, _none, Lookups()))
    try:
        await reader.start(wait=30)
        assert reader.positioned.is_set() and reader._consumer is not None
        polls = 0
        getmany = reader._consumer.getmany

        async def counted(*tps: Any, **kw: Any) -> Any:
            nonlocal polls
            polls += 1
            return await getmany(*tps, **kw)

        reader._consumer.getmany = counted  # type: ignore[method-assign]
        await asyncio.sleep(5)
        assert polls <= 1, polls  # the wait out at the start, if any: was one a second
    finally:
        await reader.stop()
        await admin.delete_topics([settings.topic("workflow")])
        await admin.close()
