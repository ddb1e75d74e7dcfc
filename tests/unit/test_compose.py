"""compose.yaml runs the same Host as `sumi up`: every service, each a `sumi serve NAME` of its own."""

from pathlib import Path

import yaml

from sumi.host.services import SERVICE_ENTRIES

ROOT = Path(__file__).resolve().parents[2]


def test_compose_runs_every_service_as_a_replica_of_its_own() -> None:
    # QC-43, WF-46: the engines that recover every obligation must be there to recover it
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    served = {spec["command"][1] for spec in services.values() if spec.get("command", [""])[0] == "serve"}
    assert served == set(SERVICE_ENTRIES)
    assert all("container_name" not in spec for spec in services.values())  # `--scale` needs none
