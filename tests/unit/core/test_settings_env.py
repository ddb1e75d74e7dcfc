"""Every SUMI_* setting is read once, by Settings, and handed down (issue 17: one typed Settings)."""

import re
from pathlib import Path

import pytest

from sumi.core.config import Settings, SettingsError
from sumi.infra._cache import cache_dir

ROOT = Path(__file__).resolve().parents[3]


def test_no_module_but_settings_reads_a_sumi_variable() -> None:  # QC-43: one source of settings
    # The CLI's profile resolves a client's target (flags, then SUMI_URL/TOKEN/SPACE/CONTEXT, then
    # the profile file): a client's settings, not the Host's.
    # The test kit, like `sumi up`, reads whether a broker and a database are given (what to start).
    allowed = {
        "services/sumi/core/config.py",
        "services/sumi/cli/_profile.py",
        "services/sumi/testing/_infra.py",
    }
    readers = re.compile(r"os\.(environ|getenv)[^\n]*SUMI_|environ\.get\(\s*\"SUMI_")
    found = [
        str(path.relative_to(ROOT))
        for folder in ("services", "projections")
        for path in (ROOT / folder).rglob("*.py")
        if str(path.relative_to(ROOT)) not in allowed and readers.search(path.read_text())
    ]
    assert found == []


def test_the_new_fields_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # QC-43
    monkeypatch.setenv("SUMI_WORKFLOW_SPARE_CONTEXTS", "5")
    monkeypatch.setenv("SUMI_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SUMI_SETTLED_RETENTION_SECONDS", "60")
    monkeypatch.setenv("SUMI_PRUNE_INTERVAL_SECONDS", "0.5")
    monkeypatch.setenv("SUMI_QUEUE_SETTLED_WINDOW", "20")
    monkeypatch.setenv("SUMI_QUEUE_BODY_BUDGET_BYTES", "1024")
    monkeypatch.setenv("SUMI_QUEUE_HOT_MESSAGES", "7")
    monkeypatch.setenv("SUMI_ADMIN_TOKEN", "sumi_secret")
    monkeypatch.setenv("SUMI_TOKEN", "sumi_client_secret")
    monkeypatch.setenv("SUMI_URL", "http://host:1")
    s = Settings.from_env()
    assert (s.workflow_spare_contexts, s.settled_retention_seconds, s.prune_interval_seconds) == (5, 60, 0.5)
    assert (s.queue_settled_window, s.queue_body_budget_bytes, s.queue_hot_messages) == (20, 1024, 7)
    assert cache_dir(s.cache_dir) == tmp_path / "cache" and (tmp_path / "cache").is_dir()
    assert (s.admin_token, s.deploy_token, s.deploy_url) == ("sumi_secret", "sumi_client_secret", "http://host:1")
    assert "secret" not in repr(s)  # secrets stay out of logs...
    assert "sumi_secret" not in s.to_env().values()  # ...and out of every service's environment
    # A service started with `to_env` sees the same settings (the admin token and the client's aside).
    monkeypatch.delenv("SUMI_ADMIN_TOKEN")
    monkeypatch.delenv("SUMI_TOKEN")
    monkeypatch.delenv("SUMI_URL")
    for name, value in s.to_env().items():
        monkeypatch.setenv(name, value)
    assert Settings.from_env() == s.__class__(
        **{**s.__dict__, "admin_token": "", "deploy_token": "", "deploy_url": "http://127.0.0.1:8080"}
        | {"launch_kafka": False, "launch_postgres": False}  # a service is handed them; `up` starts them
    )


def test_what_sumi_up_starts_and_on_which_ports_comes_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:  # QC-43
    for name in ("SUMI_KAFKA_BOOTSTRAP", "SUMI_DATABASE_URL", "SUMI_KAFKA_PORT", "SUMI_PG_PORT", "SUMI_HTTP_PORT"):
        monkeypatch.delenv(name, raising=False)
    s = Settings.from_env()
    assert (s.launch_kafka, s.launch_postgres, s.kafka_port, s.pg_port, s.http_port) == (True, True, 9092, 5432, 8080)
    monkeypatch.setenv("SUMI_KAFKA_BOOTSTRAP", "broker:9092")
    monkeypatch.setenv("SUMI_PG_PORT", "15432")
    s = Settings.from_env()
    assert (s.launch_kafka, s.launch_postgres, s.pg_port) == (False, True, 15432)
    monkeypatch.setenv("SUMI_HTTP_PORT", "80a")
    with pytest.raises(SettingsError, match="SUMI_HTTP_PORT='80a' is not a port number"):
        Settings.from_env()
    monkeypatch.setenv("SUMI_HTTP_PORT", "70000")
    with pytest.raises(SettingsError, match="is not a port number"):
        Settings.from_env()
