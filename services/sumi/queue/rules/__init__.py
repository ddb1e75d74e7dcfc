"""The queue engine's pure part, no I/O: its state and fold (`_state`), decisions (`_decide`), batch
planning (`_batching`), control records (`_control`), memory bounds (`_memory`) and snapshots (`_snapshot`)."""
