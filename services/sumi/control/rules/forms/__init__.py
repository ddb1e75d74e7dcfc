"""The Forms this Host supports, by exact URL (one module per Form)."""

from sumi.control.rules.forms._base import NAME_PATTERN, NAME_RE, Form, Registry, ResourceView
from sumi.control.rules.forms.durable_workflow import DurableWorkflow
from sumi.control.rules.forms.module_worker import ModuleWorker
from sumi.control.rules.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE,
    QUEUE_CONSUMER,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.control.rules.forms.queue import AtLeastOnceQueue
from sumi.control.rules.forms.queue_consumer import QueueConsumer
from sumi.control.rules.forms.worker_deployment import WorkerDeployment
from sumi.control.rules.forms.worker_version import WorkerVersion

FORMS: dict[str, Form] = {
    QUEUE: AtLeastOnceQueue(),
    MODULE_WORKER: ModuleWorker(),
    WORKER_VERSION: WorkerVersion(),
    WORKER_DEPLOYMENT: WorkerDeployment(),
    QUEUE_CONSUMER: QueueConsumer(),
    DURABLE_WORKFLOW: DurableWorkflow(),
}

__all__ = ["FORMS", "NAME_PATTERN", "NAME_RE", "Form", "Registry", "ResourceView"]
