"""The queue engine: QueueConsumer delivery over the AtLeastOnceQueue log (QC-21..45).

`engine.Engine` is the service (served by `sumi.host.queue_service`); `_state`, `_decide` and `_batching`
are its pure core (no Kafka, no database), `_control` its view of the control
log, `_runs` one batch in the worker runtime. The group commit is `sumi.wire.outbox`; the
workflow client its handlers' workflow bindings call is given to `Engine` (`sumi.host.queue_service`).
"""
