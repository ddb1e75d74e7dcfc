"""The Forms this Host supports, by exact URL (one module per Form)."""

from sumi.control.forms._base import Form, Registry, ResourceView
from sumi.control.forms.module_worker import ModuleWorker
from sumi.control.forms.names import MODULE_WORKER, QUEUE
from sumi.control.forms.queue import AtLeastOnceQueue

FORMS: dict[str, Form] = {
    QUEUE: AtLeastOnceQueue(),
    MODULE_WORKER: ModuleWorker(),
}

__all__ = ["FORMS", "Form", "Registry", "ResourceView"]
