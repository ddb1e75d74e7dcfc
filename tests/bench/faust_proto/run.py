"""Runs the prototype's scenarios against a broker and prints their figures as JSON.

    .venv-faust/bin/python -m tests.bench.faust_proto.run --bootstrap 127.0.0.1:PORT \
        --scenario throughput|kill|rebuild|drain|all (comma-separated) [--work DIR]
        [--n 20000] [--replicas 1,2] [--sizes 100000,1000000] [--stores memory,rocksdb]

Workers are child processes of `tests.bench.faust_proto.app`, each app ID fresh per run (its
topics, group and changelogs new). Records: key = queue, value = {"kind", "id"}.
"""

import argparse
import asyncio
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

PARTITIONS = 6
QUEUES = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Run:
    def __init__(self, bootstrap: str, work: Path, app_id: str, **env: str) -> None:
        self.bootstrap = bootstrap
        self.app_id = app_id
        self.dir = work / app_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.events = self.dir / "events.jsonl"
        self.env = env
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    # ---- workers -------------------------------------------------------------------------------

    def start(self, name: str, datadir: str | None = None, **env: str) -> None:
        e = {
            **os.environ,
            "PROTO_BOOTSTRAP": self.bootstrap,
            "PROTO_ID": self.app_id,
            "PROTO_EVENTS": str(self.events),
            "PROTO_DATADIR": datadir or str(self.dir / f"data-{name}"),
            "PROTO_NAME": name,
            "PROTO_WEB_PORT": str(_free_port()),
            **self.env,
            **env,
        }
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115
        self.workers[name] = subprocess.Popen(
            [sys.executable, "-m", "tests.bench.faust_proto.app", "worker", "-l", "info"],
            env=e,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, name: str) -> float:
        p = self.workers.pop(name)
        t = time.time()
        p.send_signal(signal.SIGKILL)
        p.wait()
        return t

    def stop(self, name: str) -> None:
        p = self.workers.pop(name)
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def stop_all(self) -> None:
        for name in list(self.workers):
            self.stop(name)

    def read_events(self) -> list[dict[str, Any]]:
        if not self.events.exists():
            return []
        return [json.loads(line) for line in self.events.read_text().splitlines() if line.strip()]

    async def wait_event(self, pred: Any, timeout: float = 180.0) -> dict[str, Any]:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for e in self.read_events():
                if pred(e):
                    return e
            await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.app_id}: no such event")

    async def wait_owned(self, names: list[str], since: float = 0.0, timeout: float = 180.0) -> dict[str, list[int]]:
        """Until the named workers' last assignments (after `since`) cover every partition, settled."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            last: dict[str, dict[str, Any]] = {}
            for e in self.read_events():
                if e["e"] == "assigned" and e["t"] >= since:
                    last[e["w"]] = e
            if set(last) >= set(names):
                owned = {w: last[w]["partitions"] for w in names}
                if sorted(p for ps in owned.values() for p in ps) == list(range(PARTITIONS)) and all(owned.values()):
                    await asyncio.sleep(3.0)  # a later rebalance?
                    again = [
                        e
                        for e in self.read_events()
                        if e["e"] == "assigned" and e["t"] > max(x["t"] for x in last.values())
                    ]
                    if not again:
                        return owned
                    continue
            await asyncio.sleep(0.2)
        raise TimeoutError(f"{self.app_id}: {names} never owned every partition")

    # ---- topics --------------------------------------------------------------------------------

    async def create_topics(self, changelog: bool = False) -> None:
        """The changelogs too: a worker that did not create them itself may see them with 0 partitions
        (stale metadata) and its agent then crash-loops on PartitionsMismatch (seen with two fresh workers)."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            topics = [NewTopic(f"{self.app_id}-{t}", PARTITIONS, 1) for t in ("in", "out")]
            if changelog:
                for t in ("msgs", "pending"):
                    topics.append(
                        NewTopic(
                            f"{self.app_id}-{t}-changelog", PARTITIONS, 1, topic_configs={"cleanup.policy": "compact"}
                        )
                    )
            await admin.create_topics(topics)
        finally:
            await admin.close()

    async def produce(
        self, records: list[tuple[bytes, bytes, int | None]], topic: str | None = None, rate: float = 0
    ) -> None:
        """Records (key, value, partition) to the input (or `topic`), at `rate` per second if given."""
        p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5, max_batch_size=256 << 10, acks="all")
        await p.start()
        try:
            t0 = time.monotonic()
            futs = []
            for i, (k, v, part) in enumerate(records):
                futs.append(await p.send(topic or f"{self.app_id}-in", v, key=k, partition=part))
                if rate and i % 100 == 99:
                    ahead = (i + 1) / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                if len(futs) > 20000:
                    await asyncio.gather(*futs)
                    futs = []
            await asyncio.gather(*futs)
        finally:
            await p.stop()

    async def read_all(self, topic: str, isolation: str = "read_committed") -> list[Any]:
        c = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            isolation_level=isolation,
            enable_auto_commit=False,
            max_partition_fetch_bytes=8 << 20,
        )
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            ends = await c.end_offsets(tps)
            out: list[Any] = []
            idle = 0
            while [tp for tp in tps if await c.position(tp) < ends[tp]]:
                batch = await c.getmany(timeout_ms=500, max_records=20000)
                for ms in batch.values():
                    out.extend(ms)
                idle = 0 if batch else idle + 1
                if idle >= 6:  # 3 s without a record: past the last stable offset (an open or aborted tail)
                    break
            return out
        finally:
            await c.stop()


class Deliveries:
    """Follows the output topic (read_committed) from the start: every delivery, when it arrived."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.seen: list[tuple[float, int, int, float, dict[str, Any]]] = []  # (arrived, partition, offset, ts, value)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        c = AIOKafkaConsumer(
            bootstrap_servers=self.run.bootstrap, isolation_level="read_committed", enable_auto_commit=False
        )
        await c.start()
        tps = [TopicPartition(f"{self.run.app_id}-out", p) for p in range(PARTITIONS)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)

        async def follow() -> None:
            try:
                while True:
                    batch = await c.getmany(timeout_ms=200, max_records=20000)
                    now = time.time()
                    for tp, ms in batch.items():
                        for m in ms:
                            self.seen.append((now, tp.partition, m.offset, m.timestamp / 1000, json.loads(m.value)))
            finally:
                await c.stop()

        self.task = asyncio.create_task(follow())

    def ids(self) -> list[str]:
        return [v["id"] for *_, v in self.seen if "id" in v]

    async def until(self, n: int, timeout: float = 600.0) -> float:
        deadline = time.time() + timeout
        while len(self.ids()) < n:
            if time.time() > deadline:
                raise TimeoutError(f"{len(self.ids())} of {n} deliveries")
            await asyncio.sleep(0.05)
        return time.time()

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass


def _crash(run: Run, name: str) -> str | None:
    """The first reason faust gave for a crash of the worker `name`, if it crashed."""
    for line in (run.dir / f"{name}.log").read_text(errors="replace").splitlines():
        if "Crashed reason=" in line and "CancelledError" not in line:
            return line.split("Crashed reason=", 1)[1][:160]
    return None


def queue_of(i: int) -> bytes:
    return f"q-{i % QUEUES}".encode()


def accepted(i: int) -> tuple[bytes, bytes, None]:
    return queue_of(i), json.dumps({"kind": "accepted", "id": f"m-{i:08d}"}).encode(), None


def acked(i: int) -> tuple[bytes, bytes, None]:
    return queue_of(i), json.dumps({"kind": "acked", "id": f"m-{i:08d}"}).encode(), None


def workload(start: int, n: int, ack_lag: int = 500) -> list[tuple[bytes, bytes, None]]:
    """n messages accepted, each acknowledged `ack_lag` messages later, all but the last ack_lag acked."""
    recs = []
    for i in range(start, start + n):
        recs.append(accepted(i))
        if i - ack_lag >= start:
            recs.append(acked(i - ack_lag))
    return recs


def fold_input(recs: list[tuple[bytes, bytes, Any]]) -> tuple[set[str], dict[str, int]]:
    pending: set[str] = set()
    counts: dict[str, int] = collections.Counter()
    for k, v, _ in recs:
        r = json.loads(v)
        if r["kind"] == "accepted" and r["id"] not in pending:
            pending.add(r["id"])
            counts[k.decode()] += 1
        elif r["kind"] == "acked" and r["id"] in pending:
            pending.discard(r["id"])
            counts[k.decode()] -= 1
    return pending, {q: c for q, c in counts.items() if c}


async def fold_changelogs(run: Run) -> tuple[set[str], dict[str, int]]:
    ids: dict[bytes, Any] = {}
    for m in await run.read_all(f"{run.app_id}-msgs-changelog"):
        ids[m.key] = None if m.value is None else json.loads(m.value)
    counts: dict[bytes, Any] = {}
    for m in await run.read_all(f"{run.app_id}-pending-changelog"):
        counts[m.key] = None if m.value is None else json.loads(m.value)
    return {k.decode() for k, v in ids.items() if v is not None}, {k.decode(): v for k, v in counts.items() if v}


# ---- scenarios ---------------------------------------------------------------------------------


async def throughput(bootstrap: str, work: Path, replicas: int, n: int) -> dict[str, Any]:
    run = Run(bootstrap, work, f"tp{replicas}-{int(time.time())}", PROTO_STORE="rocksdb://")
    await run.create_topics(changelog=True)
    names = [f"w{i}" for i in range(replicas)]
    try:
        for name in names:
            run.start(name)
        await run.wait_owned(names)
        out = Deliveries(run)
        await out.start()
        recs = workload(0, n)
        t0 = time.time()
        await run.produce(recs)
        t_produced = time.time()
        t_done = await out.until(n)
        await asyncio.sleep(2.0)
        ids = out.ids()
        await out.stop()
        ticks = [e for e in run.read_events() if e["e"] == "tick"]
        return {
            "replicas": replicas,
            "input_records": len(recs),
            "produce_s": round(t_produced - t0, 2),
            "all_delivered_s": round(t_done - t0, 2),
            "records_per_s": round(len(recs) / (t_done - t0)),
            "deliveries": len(ids),
            "distinct": len(set(ids)),
            "rss_mib": {w: max((e["rss_mib"] for e in ticks if e["w"] == w), default=None) for w in names},
        }
    finally:
        run.stop_all()


async def kill(bootstrap: str, work: Path, standbys: int, preload: int, n: int, rate: float) -> dict[str, Any]:
    run = Run(
        bootstrap, work, f"kill-sb{standbys}-{int(time.time())}", PROTO_STORE="rocksdb://", PROTO_STANDBYS=str(standbys)
    )
    await run.create_topics(changelog=True)
    try:
        run.start("a")
        run.start("b")
        owned = await run.wait_owned(["a", "b"])
        out = Deliveries(run)
        await out.start()
        pre = [accepted(i) for i in range(preload)]  # state to take over: `preload` pending messages
        await run.produce(pre)
        await out.until(preload)
        load = workload(preload, n)
        producing = asyncio.create_task(run.produce(load, rate=rate))
        await asyncio.sleep(len(load) / rate / 3)
        t_kill = run.kill("b")
        await producing
        t_all = await out.until(preload + n)
        await asyncio.sleep(3.0)
        moved = owned["b"]
        after = [s for s in out.seen if s[1] in moved and s[3] >= t_kill and "id" in s[4]]
        first_ts = min((s[3] for s in after), default=None)  # the survivor's send (record timestamp)
        first_seen = min((s[0] for s in after), default=None)  # its commit, as a read_committed reader saw it
        events = run.read_events()
        a_assigned = [e for e in events if e["w"] == "a" and e["e"] == "assigned" and e["t"] > t_kill]
        a_recovered = [e for e in events if e["w"] == "a" and e["e"] == "recovery" and e["t"] > t_kill]
        ids = out.ids()
        counts = collections.Counter(ids)
        all_in = pre + load
        want_pending, want_counts = fold_input(all_in)
        want_ids = {json.loads(v)["id"] for _, v, _ in all_in if json.loads(v)["kind"] == "accepted"}
        got_pending, got_counts = await fold_changelogs(run)
        uncommitted = await run.read_all(f"{run.app_id}-out", "read_uncommitted")
        await out.stop()
        return {
            "standby_replicas": standbys,
            "a_crashed": _crash(run, "a"),
            "preloaded_pending": preload,
            "input_records": len(all_in),
            "rate_per_s": rate,
            "b_owned": moved,
            "rebalance_after_kill_s": round(a_assigned[0]["t"] - t_kill, 2) if a_assigned else None,
            "recovered_after_kill_s": round(a_recovered[-1]["t"] - t_kill, 2) if a_recovered else None,
            "first_output_moved_s": round(first_ts - t_kill, 2) if first_ts else None,
            "first_output_moved_committed_s": round(first_seen - t_kill, 2) if first_seen else None,
            "all_delivered_after_kill_s": round(t_all - t_kill, 2),
            "deliveries": len(ids),
            "duplicated": sum(1 for c in counts.values() if c > 1),
            "lost": len(want_ids - set(counts)),
            "unexpected": len(set(counts) - want_ids),
            "output_records_read_uncommitted": sum(1 for m in uncommitted if b"__drain__" != m.key),
            "table_pending_ids_equal_fold": got_pending == want_pending,
            "table_pending_ids": [len(got_pending), len(want_pending)],
            "table_counts_equal_fold": got_counts == want_counts,
        }
    finally:
        run.stop_all()


async def rebuild(bootstrap: str, work: Path, n: int, store: str) -> dict[str, Any]:
    run = Run(bootstrap, work, f"rb{n // 1000}k-{store}-{int(time.time())}", PROTO_STORE=f"{store}://", PROTO_COUNT="1")
    await run.create_topics(changelog=True)
    entries = [(f"m-{i:08d}".encode(), json.dumps(f"q-{i % QUEUES}").encode(), i % PARTITIONS) for i in range(n)]
    t0 = time.time()
    await run.produce(entries, topic=f"{run.app_id}-msgs-changelog")
    write_s = time.time() - t0
    del entries
    res: dict[str, Any] = {"entries": n, "store": store, "changelog_write_s": round(write_s, 1)}
    try:
        for attempt in ("fresh", "restart") if store == "rocksdb" else ("fresh",):
            since = time.time()
            run.start("w", datadir=str(run.dir / "data"))
            await run.wait_event(lambda e, s=since: e["e"] == "assigned" and e["t"] > s and e["partitions"])
            done = await run.wait_event(
                lambda e, s=since: e["e"] == "recovery" and "complete" in e["msg"] and e["t"] > s, 900
            )
            assigned = [e for e in run.read_events() if e["e"] == "assigned" and e["t"] > since and e["partitions"]][0]
            await asyncio.sleep(3.0)
            ticks = [e for e in run.read_events() if e["e"] == "tick" and e["t"] > done["t"]]
            res[attempt] = {
                "rebuild_s": round(done["t"] - assigned["t"], 2),
                "start_to_ready_s": round(done["t"] - since, 2),
                "rows": done.get("msgs"),
                "rss_mib_at_ready": round(done["rss_mib"], 1),
                "rss_mib_after": round(ticks[-1]["rss_mib"], 1) if ticks else None,
            }
            run.stop("w")
        if store == "rocksdb":
            res["disk_mib"] = round(
                sum(f.stat().st_size for f in (run.dir / "data").rglob("*") if f.is_file()) / 2**20, 1
            )
    finally:
        run.stop_all()
    return res


async def drain(bootstrap: str, work: Path, drain_s: float) -> dict[str, Any]:
    run = Run(bootstrap, work, f"drain-{int(time.time())}", PROTO_STORE="rocksdb://", PROTO_DRAIN_S=str(drain_s))
    await run.create_topics(changelog=True)
    try:
        run.start("a")
        await run.wait_owned(["a"])
        out = Deliveries(run)
        await out.start()
        producing = asyncio.create_task(run.produce(workload(0, 6000), rate=250))
        await asyncio.sleep(5)
        t_join = time.time()
        run.start("b")
        await run.wait_event(lambda e: e["w"] == "b" and e["e"] == "assigned" and e["partitions"])
        await producing
        await out.until(6000)
        await asyncio.sleep(2)
        ev = run.read_events()
        a_rev = [e for e in ev if e["w"] == "a" and e["e"].startswith("revoke") and e["t"] > t_join]
        b_asg = [e for e in ev if e["w"] == "b" and e["e"] == "assigned" and e["partitions"]]
        b_first = [e for e in ev if e["w"] == "b" and e["e"] == "first"]
        a_end = max(e["t"] for e in a_rev if e["e"] == "revoke-end")
        committed = await run.read_all(f"{run.app_id}-out")
        uncommitted = await run.read_all(f"{run.app_id}-out", "read_uncommitted")
        ids = out.ids()
        await out.stop()
        return {
            "drain_s": drain_s,
            "a_revoke": [(e["e"], round(e["t"] - t_join, 2), e["partitions"]) for e in a_rev],
            "b_assigned_after_join_s": round(b_asg[0]["t"] - t_join, 2) if b_asg else None,
            "b_owned": b_asg[0]["partitions"] if b_asg else None,
            "a_crashed": _crash(run, "a"),
            "b_crashed": _crash(run, "b"),
            "b_assigned_after_a_drain_end": bool(b_asg) and b_asg[0]["t"] >= a_end,
            "b_first_record_after_a_drain_end": bool(b_first) and min(e["t"] for e in b_first) >= a_end,
            "drain_markers_written_read_uncommitted": sum(1 for m in uncommitted if m.key == b"__drain__"),
            "drain_markers_committed": sum(1 for m in committed if m.key == b"__drain__"),
            "drain_markers_committed_partitions": sorted(m.partition for m in committed if m.key == b"__drain__"),
            "deliveries": len(ids),
            "duplicated": len(ids) - len(set(ids)),
        }
    finally:
        run.stop_all()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--scenario", default="all")
    ap.add_argument("--work", default="")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--replicas", default="1,2")
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--stores", default="memory,rocksdb")
    a = ap.parse_args()
    work = Path(a.work or tempfile.mkdtemp(prefix="faust-proto-"))
    figures: dict[str, Any] = {"cores": os.cpu_count(), "load_avg_at_start": os.getloadavg()}
    todo = ["throughput", "drain", "kill", "rebuild"] if a.scenario == "all" else a.scenario.split(",")
    if "throughput" in todo:
        figures["throughput"] = []
        for r in [int(x) for x in a.replicas.split(",")]:
            figures["throughput"].append(await throughput(a.bootstrap, work, r, a.n))
            print(json.dumps(figures["throughput"][-1]), flush=True)
    if "drain" in todo:
        figures["drain"] = await drain(a.bootstrap, work, 3.0)
        print(json.dumps(figures["drain"]), flush=True)
    if "kill" in todo:
        figures["kill"] = [await kill(a.bootstrap, work, sb, 20_000, 8_000, 250) for sb in (0, 1)]
        print(json.dumps(figures["kill"]), flush=True)
    if "rebuild" in todo:
        figures["rebuild"] = [
            await rebuild(a.bootstrap, work, n, s)
            for n in [int(x) for x in a.sizes.split(",")]
            for s in a.stores.split(",")
        ]
        print(json.dumps(figures["rebuild"]), flush=True)
    figures["load_avg_at_end"] = os.getloadavg()
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
