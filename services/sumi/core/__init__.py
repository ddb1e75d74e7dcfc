"""The kernel every layer stands on, with no I/O library (no aiokafka, fastavro, psycopg or starlette).

The records and commands (`records`, `commands`, `canonical`, `problems`, `ids`, `times`, `backoff`,
`sealing`) and the process basics (`config`, the settings; `clock`, `logs`, `logline`, `allocator`,
`offloop`). The Kafka and PostgreSQL plumbing around it is `sumi.wire`.
"""
