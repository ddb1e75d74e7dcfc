"""The settings a Host refuses to start with, and the test-only opt-in (WF-47)."""

import logging

import pytest

from sumi.cli import main
from sumi.core.config import MIN_WORKFLOW_RETENTION_SECONDS, Settings, SettingsError
from sumi.workflow.engine import limits_of, warn_if_nonconformant

BASE = {"kafka_bootstrap": "127.0.0.1:1", "database_url": "postgresql://nowhere"}


def test_the_retention_defaults_to_the_minimum_and_reaches_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    # WF-47
    monkeypatch.delenv("SUMI_WORKFLOW_RETENTION_SECONDS", raising=False)
    settings = Settings.from_env()
    assert settings.workflow_retention_seconds == MIN_WORKFLOW_RETENTION_SECONDS == 2_592_000
    assert limits_of(settings).retention_ms == 2_592_000_000 and settings.nonconformance() == []
    monkeypatch.setenv("SUMI_WORKFLOW_RETENTION_SECONDS", "5000000")
    assert limits_of(Settings.from_env()).retention_ms == 5_000_000_000


@pytest.mark.parametrize("seconds", ["2591999", "60", "0", "-1"])
def test_a_retention_under_the_minimum_is_refused(monkeypatch: pytest.MonkeyPatch, seconds: str) -> None:  # WF-47
    monkeypatch.setenv("SUMI_WORKFLOW_RETENTION_SECONDS", seconds)
    monkeypatch.delenv("SUMI_NONCONFORMANT_TEST_SETTINGS", raising=False)
    with pytest.raises(SettingsError) as refused:
        Settings.from_env()
    assert "SUMI_WORKFLOW_RETENTION_SECONDS" in str(refused.value) and "2592000" in str(refused.value)
    with pytest.raises(SettingsError):
        Settings(**BASE, workflow_retention_seconds=int(seconds))  # type: ignore[arg-type]


def test_a_retention_that_is_not_an_integer_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:  # WF-47
    monkeypatch.setenv("SUMI_WORKFLOW_RETENTION_SECONDS", "30d")
    with pytest.raises(SettingsError, match="SUMI_WORKFLOW_RETENTION_SECONDS"):
        Settings.from_env()


def test_the_service_exits_non_zero_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # WF-47: refused before anything starts
    monkeypatch.setenv("SUMI_WORKFLOW_RETENTION_SECONDS", "60")
    monkeypatch.delenv("SUMI_NONCONFORMANT_TEST_SETTINGS", raising=False)
    assert main(["serve", "workflow"]) == 2
    err = capsys.readouterr().err
    assert "SUMI_WORKFLOW_RETENTION_SECONDS=60" in err and "2592000" in err and "WF-47" in err


def test_the_test_only_opt_in_allows_it_and_says_the_host_is_not_conformant(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:  # WF-47
    monkeypatch.setenv("SUMI_WORKFLOW_RETENTION_SECONDS", "2")
    monkeypatch.setenv("SUMI_NONCONFORMANT_TEST_SETTINGS", "1")
    settings = Settings.from_env()
    assert limits_of(settings).retention_ms == 2000
    assert settings.to_env()["SUMI_NONCONFORMANT_TEST_SETTINGS"] == "1"  # `sumi up`'s children see it too
    with caplog.at_level(logging.WARNING, logger="sumi.workflow"):
        warn_if_nonconformant(settings)
    (line,) = caplog.messages
    assert "not conformant to DurableWorkflow 0.3.0" in line and "WF-47" in line and "SUMI_WORKFLOW_RETENTION" in line


def test_engines_commit_per_partition_and_the_removed_mode_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    # WF-46, QC-42: a mode that is gone must not quietly fall back to another way of fencing
    monkeypatch.delenv("SUMI_TRANSACTIONS", raising=False)
    Settings.from_env()
    monkeypatch.setenv("SUMI_TRANSACTIONS", "partition")
    assert "SUMI_TRANSACTIONS" not in Settings.from_env().to_env()
    monkeypatch.setenv("SUMI_TRANSACTIONS", "replica")
    with pytest.raises(SettingsError, match="SUMI_TRANSACTIONS='replica'"):
        Settings.from_env()
