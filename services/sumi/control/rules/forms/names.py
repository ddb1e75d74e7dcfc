"""The Form URLs this Host supports (host-api.md section 2)."""

from sumi.control.rules.forms._base import form_url

QUEUE = form_url("AtLeastOnceQueue", "0.2.0")
MODULE_WORKER = form_url("ModuleWorker", "0.3.0")
WORKER_VERSION = form_url("WorkerVersion", "0.5.0")
WORKER_DEPLOYMENT = form_url("WorkerDeployment", "0.4.0")
QUEUE_CONSUMER = form_url("QueueConsumer", "0.3.0")
DURABLE_WORKFLOW = form_url("DurableWorkflow", "0.3.0")
