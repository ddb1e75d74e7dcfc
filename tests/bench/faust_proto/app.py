"""The faust worker of the prototype: configured by environment, run as `python -m ... worker`.

PROTO_BOOTSTRAP   the broker (host:port)
PROTO_ID          the app's ID (its group, its topics' and changelogs' prefix)
PROTO_STORE       memory:// or rocksdb://
PROTO_STANDBYS    table_standby_replicas (0 or 1)
PROTO_DATADIR     where RocksDB keeps the tables
PROTO_EVENTS      the JSON-lines file this worker writes what it sees to
PROTO_DRAIN_S     how long the revoke callback holds (a queue engine's drain), 0 for none
PROTO_NAME        this worker's name in the events
PROTO_WEB_PORT    the port of faust's web server (bound on 127.0.0.1)
"""

import asyncio
import json
import logging
import os
import time
from typing import Any

import faust  # type: ignore[import-not-found]  # in .venv-faust only

ENV = os.environ
APP_ID = ENV.get("PROTO_ID", "proto")
NAME = ENV.get("PROTO_NAME", "w")
PARTITIONS = 6
DRAIN_S = float(ENV.get("PROTO_DRAIN_S", "0"))
_events = open(ENV.get("PROTO_EVENTS", os.devnull), "a", buffering=1)  # noqa: SIM115


def event(kind: str, t: float | None = None, **fields: Any) -> None:
    _events.write(json.dumps({"t": t or time.time(), "w": NAME, "pid": os.getpid(), "e": kind, **fields}) + "\n")


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


app = faust.App(
    APP_ID,
    broker=f"kafka://{ENV.get('PROTO_BOOTSTRAP', '127.0.0.1:9092')}",
    store=ENV.get("PROTO_STORE", "memory://"),
    datadir=ENV.get("PROTO_DATADIR", "proto-data"),
    processing_guarantee="exactly_once",
    table_standby_replicas=int(ENV.get("PROTO_STANDBYS", "0")),
    topic_partitions=PARTITIONS,
    topic_replication_factor=1,
    broker_session_timeout=10.0,  # as sumi's groups: the takeover waits this out after a SIGKILL
    broker_heartbeat_interval=3.0,
    broker_commit_every=1000,
    broker_commit_interval=0.5,
    web_enabled=False,  # faust 0.15.3 binds its web server even so: on loopback, a port per worker
    web_bind="127.0.0.1",
    web_port=int(ENV.get("PROTO_WEB_PORT", "6066")),
    key_serializer="raw",
    value_serializer="json",
)

inputs = app.topic(f"{APP_ID}-in", partitions=PARTITIONS, key_type=bytes, value_serializer="json")
outputs = app.topic(f"{APP_ID}-out", partitions=PARTITIONS, key_type=bytes, value_serializer="json")
pending_count = app.Table("pending", default=int, partitions=PARTITIONS, key_type=bytes)
pending_ids = app.Table("msgs", partitions=PARTITIONS, key_type=bytes)

_seen = {"n": 0, "first_after_assign": set()}


@app.agent(inputs)
async def engine(stream: Any) -> None:
    async for ev in stream.events():
        queue: bytes = ev.key
        v = ev.value
        p = ev.message.partition
        mid = v["id"].encode()
        if v["kind"] == "accepted":
            if pending_ids.get(mid) is not None:
                continue  # accepted already (a replay of the input)
            pending_ids[mid] = queue.decode()
            pending_count[queue] += 1
            # The delivery: to the output partition of the input's (the transactional producer is
            # the input partition's, and faust picks it by the partition a record is sent to).
            await outputs.send(key=queue, value={"queue": queue.decode(), "id": v["id"], "p": p}, partition=p)
        else:
            if pending_ids.get(mid) is None:
                continue
            del pending_ids[mid]
            pending_count[queue] -= 1
        if p not in _seen["first_after_assign"]:
            _seen["first_after_assign"].add(p)
            event("first", partition=p, offset=ev.message.offset)
        _seen["n"] += 1


@app.on_partitions_revoked.connect
async def on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
    parts = sorted(tp.partition for tp in revoked if tp.topic == inputs.get_topic_name())
    event("revoke-start", partitions=parts)
    if parts and DRAIN_S:
        await asyncio.sleep(DRAIN_S)  # the drain: stop the partitions' side effects...
        for p in parts:  # ...and commit their ends: does this record survive the handover?
            await outputs.send(key=b"__drain__", value={"drain": p, "w": NAME}, partition=p)
    event("revoke-end", partitions=parts)


@app.on_partitions_assigned.connect
async def on_assigned(sender: Any, assigned: Any, **kwargs: Any) -> None:
    _seen["first_after_assign"] = set()
    parts = sorted(tp.partition for tp in assigned if tp.topic == inputs.get_topic_name())
    standby = sorted(tp.partition for tp in app.assignor.assigned_standbys() if tp.topic.endswith("msgs-changelog"))
    event("assigned", partitions=parts, standbys=standby)


class _RecoveryLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "Recovery complete" in msg or "Restoring state from changelog" in msg:
            t = time.time()
            size = len(pending_ids.data) if ENV.get("PROTO_COUNT") else None  # a RocksDB count reads it all
            event("recovery", t=t, msg=msg[:60], rss_mib=rss_mib(), msgs=size)


logging.getLogger("faust").addHandler(_RecoveryLog())


@app.timer(interval=1.0)
async def heartbeat() -> None:
    event("tick", n=_seen["n"], rss_mib=rss_mib())


if __name__ == "__main__":
    event("start")
    app.main()
