"""A prototype of the queue engine's shell on faust-streaming (issue 17, item 0), and its measurement.

Not part of sumi: faust is not one of the project's dependencies. It runs in a venv of its own
(`python3 -m venv .venv-faust && .venv-faust/bin/pip install faust-streaming rocksdict`) against a
broker started apart (for instance the project's own, `sumi.infra._kafka.KafkaBroker`, on
127.0.0.1), from the repository's root:

    .venv-faust/bin/python -m tests.bench.faust_proto.run --bootstrap 127.0.0.1:PORT --scenario all

`app` is the worker: an agent on an input topic of "accepted"/"acked" records keyed by queue,
two tables (queue -> pending count; message ID -> its queue, the set of pending IDs, one key per
ID) with changelogs, `processing_guarantee="exactly_once"`, and a "delivery" record sent to an
output topic per accepted message. It writes what it sees (assignments, revocations and the
drain it holds in the revoke callback, recovery, its RSS) as JSON lines to `PROTO_EVENTS`.

`run` starts workers of it as child processes and prints the figures as JSON: throughput at one
and two workers, a SIGKILL under load (no delivery duplicated or lost in the read_committed
output, the changelogs' fold equal to the fold of the input, takeover time with and without
standby replicas), table rebuild times for 100k and 1M changelog entries (RocksDB and memory) and
the drain-before-handover check. The verdict is in docs/decisions.md.
"""
