"""`sumi deploy` end to end: a subprocess against the real Host (examples/hello-queue)."""

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hello-queue"
WORKER = "https://edge.forms.takoform.com/forms/ModuleWorker/0.3.0/"
DEPLOYMENT = "https://edge.forms.takoform.com/forms/WorkerDeployment/0.4.0/"


@pytest.fixture(autouse=True)
def own_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never the real user's profile (~/.config/sumi): each test's CLI reads a home of its own."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    monkeypatch.delenv("SUMI_CONFIG", raising=False)
    monkeypatch.delenv("SUMI_CONTEXT", raising=False)


def sumi_deploy(host: Any, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SUMI_TOKEN"}
    if token:
        env["SUMI_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "sumi.cli", "deploy", *args, "--url", host.url],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def listed(host: Any, space: str, form: str, name: str | None = None) -> list[dict[str, Any]]:
    params = {"form": form, **({"name": name} if name else {})}
    r = httpx.get(
        f"{host.url}/v2/spaces/{space}/resources",
        params=params,
        headers={"Authorization": f"Bearer {host.admin_token}"},
    )
    assert r.status_code == 200, r.text
    return r.json()["items"]  # type: ignore[no-any-return]


def get(host: Any, space: str, uid: str) -> dict[str, Any]:
    r = httpx.get(
        f"{host.url}/v2/spaces/{space}/resources/{uid}",
        headers={"Authorization": f"Bearer {host.admin_token}"},
    )
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_deploy_hello_queue_twice(host: Any, space: Any) -> None:
    first = sumi_deploy(host, str(EXAMPLE), "--worker", "hello", "--space", space.name, "--token", host.admin_token)
    assert first.returncode == 0, first.stderr
    v1 = first.stdout.strip()
    assert v1.startswith("res_"), first.stdout
    version = get(host, space.name, v1)
    assert version["name"] == "hello-v1" and version["state"] == "active"
    assert version["observed"]["handlers"] == ["queue"]
    assert version["spec"]["vars"] == {"GREETING": "hello"}
    assert {m["name"] for m in version["spec"]["modules"]} == {"worker.js", "greeting.js"}
    [worker] = listed(host, space.name, WORKER, "hello")
    assert worker["spec"] == {"runtime": "javascript", "handlers": ["queue"]}
    [deployment] = listed(host, space.name, DEPLOYMENT)
    assert deployment["name"] == "hello-deployment"
    assert deployment["spec"]["versions"] == [{"version": {"resourceUid": v1}, "percentage": 100}]

    # Again, with the token from SUMI_TOKEN: the next Version, the same Deployment moved to it.
    second = sumi_deploy(host, str(EXAMPLE), "--worker", "hello", "--space", space.name, token=space.editor_token)
    assert second.returncode == 0, second.stderr
    v2 = second.stdout.strip()
    assert get(host, space.name, v2)["name"] == "hello-v2"
    [deployment] = listed(host, space.name, DEPLOYMENT)
    assert deployment["spec"]["versions"] == [{"version": {"resourceUid": v2}, "percentage": 100}]
    assert deployment["generation"] == 2
    assert get(host, space.name, worker["uid"])["observed"] == {
        "activeDeployment": {"resourceUid": deployment["uid"]},
        "versions": 2,
    }


async def test_deploy_reports_a_failing_version(host: Any, space: Any, tmp_path: Path) -> None:
    (tmp_path / "worker.js").write_text("export default { async queue(batch) {")
    result = sumi_deploy(
        host,
        str(tmp_path),
        "--worker",
        "broken",
        "--space",
        space.name,
        "--token",
        space.editor_token,
    )
    assert result.returncode == 1, result
    assert "invalid_spec" in result.stderr and "SyntaxError" in result.stderr, result.stderr
    assert result.stdout == ""
    assert listed(host, space.name, DEPLOYMENT) == []


async def test_deploy_usage_errors(host: Any, space: Any, tmp_path: Path) -> None:
    result = sumi_deploy(host, str(EXAMPLE), "--worker", "hello", "--space", space.name)
    assert result.returncode == 2 and "token" in result.stderr
    result = sumi_deploy(
        host,
        str(tmp_path),
        "--worker",
        "hello",
        "--space",
        space.name,
        "--token",
        space.editor_token,
    )
    assert result.returncode == 2 and "no .js" in result.stderr
    (tmp_path / "worker.js").write_text("export default {};")
    (tmp_path / "sumi.json").write_text('{"queueBindings": [{"name": "OUT", "queue": "missing"}]}')
    result = sumi_deploy(host, str(tmp_path), "--worker", "w", "--space", space.name, "--token", space.editor_token)
    assert result.returncode == 1 and "missing" in result.stderr, result.stderr
