"""The Forms this Host supports, by exact URL (one module per Form)."""

from sumi.control.forms._base import NAME_PATTERN, NAME_RE, Form, Registry, ResourceView
from sumi.control.forms.durable_workflow import DurableWorkflow
from sumi.control.forms.module_worker import ModuleWorker
from sumi.control.forms.names import (
    DURABLE_WORKFLOW,
    MODULE_WORKER,
    QUEUE,
    QUEUE_CONSUMER,
    WORKER_DEPLOYMENT,
    WORKER_VERSION,
)
from sumi.control.forms.queue import AtLeastOnceQueue
from sumi.control.forms.queue_consumer import QueueConsumer
from sumi.control.forms.worker_deployment import WorkerDeployment
from sumi.control.forms.worker_version import WorkerVersion

FORMS: dict[str, Form] = {
    QUEUE: AtLeastOnceQueue(),
    MODULE_WORKER: ModuleWorker(),
    WORKER_VERSION: WorkerVersion(),
    WORKER_DEPLOYMENT: WorkerDeployment(),
    QUEUE_CONSUMER: QueueConsumer(),
    DURABLE_WORKFLOW: DurableWorkflow(),
}

__all__ = ["FORMS", "NAME_PATTERN", "NAME_RE", "Form", "Registry", "ResourceView"]
