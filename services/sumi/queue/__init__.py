"""The queue engine: QueueConsumer delivery over the AtLeastOnceQueue log (QC-21..45).

`engine.serve(settings)` is the service; `_state`, `_decide` and `_batching`
are its pure core (no Kafka, no database), `_control` its view of the control
log, `_runs` one batch in the worker runtime, `_outbox` the group commit.
"""
