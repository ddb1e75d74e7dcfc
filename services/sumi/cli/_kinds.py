"""Short kind names for the six Forms, as the CLI and manifests write them."""

from sumi.cli._errors import USAGE, CliError
from sumi.control.rules.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE,
    QUEUE_CONSUMER,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)

KINDS = {
    "queue": QUEUE,
    "worker": MODULE_WORKER,
    "version": WORKER_VERSION,
    "deployment": WORKER_DEPLOYMENT,
    "consumer": QUEUE_CONSUMER,
    "workflow": DURABLE_WORKFLOW,
}
# Manifests may also use the Forms' own names.
ALIASES = {
    "atleastoncequeue": "queue",
    "moduleworker": "worker",
    "workerversion": "version",
    "workerdeployment": "deployment",
    "queueconsumer": "consumer",
    "durableworkflow": "workflow",
}
# Creation order: what a Resource references exists before it (deletes go the other way).
ORDER = ["queue", "worker", "version", "deployment", "workflow", "consumer"]


def kind(name: str) -> str:
    key = name.lower().rstrip("s") if name.lower().rstrip("s") in KINDS else name.lower()
    key = ALIASES.get(key, key)
    if key not in KINDS:
        raise CliError(f"unknown kind {name!r} (one of {', '.join(KINDS)})", USAGE)
    return key


def of_form(form: str) -> str:
    return next((k for k, f in KINDS.items() if f == form), form)
