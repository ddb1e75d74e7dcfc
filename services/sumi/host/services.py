"""The Host's services, by name: each is `async def serve(settings)` in its package's `service`
module; the queue's sits in the Host layer (`sumi.host.queue_service`), since it joins the queue
engine to the workflow client and neither engine package imports the other. `sumi serve NAME` runs
one; `sumi up` supervises them all."""

SERVICE_ENTRIES = {
    "control": "sumi.control.service",
    "projections": "sumi_projections.service",
    "gateway": "sumi.gateway.service",
    "verifier": "sumi.verifier.service",
    "queue": "sumi.host.queue_service",  # the queue engine with the workflow client
    "workflow": "sumi.workflow.service",
}

# The services that work through a backlog: past capacity they yield a core to the gateway
# (Settings.background_nice).
BACKGROUND = frozenset({"queue", "workflow", "projections", "verifier"})
