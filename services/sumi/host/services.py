"""The Host's services, by name: each is `async def serve(settings)` in its module (the gateway is
uvicorn's). `sumi serve NAME` runs one; `sumi up` supervises them all."""

SERVICE_ENTRIES = {
    "control": "sumi.control._processor",
    "projections": "sumi_projections",
    "gateway": "sumi.gateway",
    "verifier": "sumi.verifier",
    "queue": "sumi.host.queue_service",  # the queue engine with the workflow client
    "workflow": "sumi.workflow.engine",
}
