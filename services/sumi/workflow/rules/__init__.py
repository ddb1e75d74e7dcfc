"""The workflow engine's pure part, no I/O: its state and fold (`_state`), decisions (`_decide`), control
records (`_control`), key names (`_keys`), the instance table (`_table`) and snapshots (`_snapshot`)."""
