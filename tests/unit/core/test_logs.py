"""The Host's own log as JSON lines, with the IDs of the work it is about (SUMI_LOG_FORMAT=json)."""

import asyncio
import json
import logging

import pytest

from sumi.core import logs
from sumi.core.config import Settings, SettingsError


async def test_json_lines_carry_the_tags_of_the_task(capsys: pytest.CaptureFixture[str]) -> None:
    # QC-23, WF-19: a batch's or an instance's lines name it
    logs.configure("json", "INFO")
    try:

        async def batch_run() -> None:
            logs.tag(space="demo", resource="res_c", batch="bat_1")
            await asyncio.sleep(0)
            logging.getLogger("sumi.queue").warning("handler slow: %d ms", 12)

        await asyncio.create_task(batch_run())
        logging.getLogger("sumi.queue").warning("no task tags here")
    finally:
        logs.configure("text")
    first, second = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert first["message"] == "handler slow: 12 ms" and first["level"] == "WARNING"
    assert (first["space"], first["resource"], first["batch"], first["logger"]) == (
        "demo",
        "res_c",
        "bat_1",
        "sumi.queue",
    )
    assert "batch" not in second  # the tags stayed in the task that set them


def test_the_setting_is_text_or_json() -> None:
    # DOC-6: an unknown setting value is refused, not ignored
    settings = Settings.from_env(kafka_bootstrap="k", database_url="d", log_format="json")
    assert settings.to_env()["SUMI_LOG_FORMAT"] == "json"
    with pytest.raises(SettingsError, match="SUMI_LOG_FORMAT"):
        Settings.from_env(kafka_bootstrap="k", database_url="d", log_format="xml")
