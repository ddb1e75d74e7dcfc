"""The Host's plumbing to its stores, around the pure kernel of `sumi.core`.

Kafka: the clients and transactions (`kafka`, `outbox`), fencing a predecessor (`fencing`), group
membership and assignment (`membership`, `assignors`, `idlefetch`), the topics (`topics`), reading
back bodies and data keys (`bodies`, `keyreader`), and the records' Avro form on the wire (`codec`).
PostgreSQL: every string in a form its text holds (`pgtext`).
"""
