"""`pip install .` (not editable) gives a Host that works without the source tree (issue 7, item 1).

The wheel is built from this checkout and installed, without its dependencies, into a fresh venv
whose only other path is the test venv's site-packages (for the dependencies; a path added by a
`.pth` line does not run that folder's editable-install hooks, so the checkout's `sumi` stays
invisible). Everything then runs from a folder outside the checkout: the installed package must
find its Avro schemas, migrations and runtime files as package data.
"""

import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sumi.infra import free_port
from sumi.infra.lifeline import die_with_parent

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "records"

ROUND_TRIP = """
import sys
from pathlib import Path

import sumi
from sumi.wire import codec
from sumi.core.records import RECORD_TYPES

assert "site-packages" in sumi.__file__ and "services" not in sumi.__file__, sumi.__file__
seen = set()
for golden in sorted(Path(sys.argv[1]).glob("*.bin")):
    data = golden.read_bytes()
    record = codec.decode(data)
    again = codec.encode(record)
    if again[:10] == data[:10]:  # written with the current schema: the same bytes
        assert again == data, golden.name
    else:  # an earlier schema (schemas/history, in the wheel): upgraded, then stable
        assert codec.decode(again) == record, golden.name
    seen.add(type(record).__name__)
missing = set(RECORD_TYPES) - seen
assert not missing, f"no golden record decoded for {sorted(missing)}"
print(len(seen))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(work / "dist"), str(ROOT)],
        check=True,
        cwd=work,
    )
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    python = work / "venv" / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next((work / "dist").glob("sumi-*.whl"))
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, cwd=work)
    yield work


def test_the_installed_wheel_encodes_and_decodes_every_record_type(installed: Path) -> None:
    python = installed / "venv" / "bin" / "python"
    out = subprocess.run(
        [str(python), "-c", ROUND_TRIP, str(FIXTURES)], check=True, capture_output=True, text=True, cwd=installed
    )
    assert int(out.stdout.strip()) >= 20


def test_the_installed_wheel_runs_sumi_up_to_ready(installed: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMI_")}
    env.update(
        HOME=str(installed / "home"),  # `sumi up` writes the local profile: never the real user's
        XDG_CONFIG_HOME=str(installed / "home" / ".config"),
        SUMI_STATE_DIR=str(installed / "state"),
        SUMI_KAFKA_PORT=str(free_port()),
        SUMI_PG_PORT=str(free_port()),
        SUMI_HTTP_PORT=str(free_port()),
    )
    log = installed / "up.out"
    with open(log, "wb") as out:
        up = subprocess.Popen(
            [str(installed / "venv" / "bin" / "sumi"), "up"],
            env=env,
            cwd=installed,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
    try:
        deadline = time.monotonic() + 240
        while "sumi: ready in" not in log.read_text():
            assert up.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0, log.read_text()
    assert "sumi: stopped in" in log.read_text()
    profile = (installed / "home" / ".config" / "sumi" / "config.toml").read_text()
    assert "[contexts.local]" in profile and env["SUMI_HTTP_PORT"] in profile, profile


def test_the_installed_wheel_gives_the_same_cli(installed: Path) -> None:
    # WF-18, QC-46 (the verbs that create and apply): the non-editable install's `sumi` is the same CLI
    sumi = str(installed / "venv" / "bin" / "sumi")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUMI_")}
    env.update(HOME=str(installed / "home"), XDG_CONFIG_HOME=str(installed / "home" / ".config"))
    top = subprocess.run([sumi, "--help"], capture_output=True, text=True, env=env, cwd=installed, timeout=120)
    assert top.returncode == 0, top.stderr
    for verb in ("apply", "instances", "queue", "replay", "audit", "deploy", "token", "space"):
        assert verb in top.stdout, (verb, top.stdout)
    verb = subprocess.run(
        [sumi, "instances", "create", "--help"], capture_output=True, text=True, env=env, cwd=installed, timeout=120
    )
    assert verb.returncode == 0 and "--params" in verb.stdout, verb
    deploy = subprocess.run([sumi, "deploy", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert deploy.returncode == 0 and "--check" in deploy.stdout, deploy
    usage = subprocess.run([sumi, "frobnicate"], capture_output=True, text=True, env=env, timeout=120)
    assert usage.returncode == 2, usage
