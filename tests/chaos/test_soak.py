"""Chaos soak (issue 20 item 1): a mixed workload while a driver SIGKILLs and SIGSTOPs the gateway,
each processor, the worker runtimes, the broker and the database at random moments (the
supervisor that launched the broker and the database restarts them when killed). Checked
afterwards from the topics: no message lost, none acknowledged twice, each acknowledged or dead-lettered after its
1 + maxRetries deliveries; every step effect at most its committed attempts plus the crashes;
no history with a gap or a fork; `sumi replay` equal to the live read models.

Short form in the normal run; SUMI_CHAOS_SECONDS lengthens the fault phase, SUMI_CHAOS_SEED
picks another run of faults.
"""

import asyncio
import collections
import contextlib
import os
import random
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import psutil
import pytest

from sumi.core import records as r
from sumi.core.config import Settings
from sumi.host.audit import replay_and_compare
from sumi.host.supervisor import Supervisor
from sumi.infra import KafkaBroker, PostgresServer
from sumi.wire import kafka
from tests.conformance.kit import Api, Flows
from tests.hostkit import Host, new_settings, new_space
from tests.httpkit import QUEUE, WORKFLOW, b64

pytestmark = pytest.mark.integration

SECONDS = float(os.environ.get("SUMI_CHAOS_SECONDS", "15"))
CALM = 5.0  # seconds of traffic before the first fault and after the last
SEED = int(os.environ.get("SUMI_CHAOS_SEED", "20"))
MAX_RETRIES = 2
QUEUE_JS = r"""
const dec = new TextDecoder();
export default { async queue(batch, env) {
  for (const m of batch.messages) {
    if (dec.decode(m.body).startsWith('fail')) await batch.retry(m.id);
    else await batch.acknowledge(m.id);
  }
} };
"""
FLOW_JS = """
export default {};
export class Flow {
  constructor(env) { this.env = env; }
  async run(event, step) {
    const id = event.instanceId;
    const effect = (name, v) => async () => { await this.env.OUT.send(`${id}|${name}`); return { v }; };
    const a = await step.do('a', effect('a', 1));
    await step.sleep('nap', 1);
    const w = await step.waitForEvent('w', { type: 'go', timeoutSeconds: 600 });
    let failed = null;
    try {
      await step.do('flaky', async () => { await this.env.OUT.send(`${id}|flaky`); throw new Error('always'); },
                    { maxAttempts: 2, initialDelaySeconds: 1 });
    } catch (e) { failed = e.name; }
    const b = await step.do('b', effect('b', 2));
    return { sum: a.v + b.v, w: w.k, failed };
  }
}
"""


@contextmanager
def chaos_host() -> Iterator[tuple[Host, KafkaBroker, PostgresServer]]:
    """A Host on a broker and a database of its own, supervised by it: the driver may kill them."""
    from sumi.host.bootstrap import issue_admin_token, prepare

    broker, pg = KafkaBroker(), PostgresServer()
    broker.launch()
    pg.launch()
    supervisor = None
    logs = tempfile.TemporaryFile()
    try:
        broker.wait_started()
        pg.wait_started()
        settings = new_settings(broker.bootstrap, pg.url, decision_timeout=10.0)
        asyncio.run(prepare(settings))
        token = "sumi_chaos_" + uuid.uuid4().hex
        supervisor = Supervisor(settings, parts=[broker, pg], stderr=logs).start()
        asyncio.run(issue_admin_token(settings, token, timeout=120))
        supervisor.wait_ready()
        yield Host(supervisor.url, token, settings, supervisor), broker, pg
    finally:
        if supervisor is not None:
            supervisor.stop()
        broker.stop()
        pg.stop()
        logs.close()


def every_log(host: Host, broker: KafkaBroker, pg: PostgresServer) -> bytes:
    """What the services, the broker and the database wrote to their logs so far, faults and all."""
    out = host.supervisor.stderr
    assert out is not None
    out.flush()
    out.seek(0)
    return out.read() + (broker.data_dir / "broker.log").read_bytes() + (pg.base_dir / "postgres.log").read_bytes()


class Driver:
    """Faults at random moments, by kind; each service is hit, the runtimes, the broker and the database."""

    def __init__(self, host: Host, broker: KafkaBroker, pg: PostgresServer, rng: random.Random) -> None:
        self.sup, self.broker, self.pg, self.rng = host.supervisor, broker, pg, rng
        self.faults: collections.Counter[str] = collections.Counter()

    def kinds(self) -> list[str]:
        services = [s for s in self.sup.services if s != "verifier"]
        return [
            *(f"kill {s}" for s in services),
            *(f"stop {s}" for s in services),
            *(f"{what} {part}" for what in ("kill", "stop") for part in ("runtime", "broker", "database")),
        ]

    async def run(self, until: float) -> None:
        kinds = self.kinds()
        self.rng.shuffle(kinds)  # every kind once in the short form, then at random
        # The broker and the database last: their restarts are the longest outages.
        kinds.sort(key=lambda k: k.split(" ")[1] not in ("broker", "database"))
        while kinds or time.monotonic() < until:
            kind = kinds.pop() if kinds else self.rng.choice(self.kinds())
            try:
                await asyncio.to_thread(self.inject, kind)
                self.faults[kind] += 1
            except (psutil.Error, ValueError, AttributeError):
                pass  # its target was already down (restarting): not a fault injected
            await asyncio.sleep(self.rng.uniform(0.7, 1.5))

    def inject(self, kind: str) -> None:
        what, name = kind.split(" ", 1)
        targets = self.targets(name)
        if what == "kill":
            for p in targets:
                p.kill()
            return
        # A pause: the process is alive, holds its sockets and answers nothing; the broker's
        # sessions and the database's connections time out on the other side meanwhile. The
        # whole tree: a postmaster paused alone leaves its backends answering.
        targets += [c for p in targets for c in p.children(recursive=True)]
        paused = []
        try:
            for p in targets:
                p.suspend()
                paused.append(p)
            time.sleep(self.rng.uniform(0.5, 1.5))
        finally:
            for p in paused:
                with contextlib.suppress(psutil.NoSuchProcess):  # killed meanwhile as wedged: restarted
                    p.resume()

    def targets(self, name: str) -> list[psutil.Process]:
        if name in ("broker", "database"):
            return [_main_child(self.broker if name == "broker" else self.pg)]
        if name == "runtime":
            return [
                p
                for service in ("queue", "workflow")
                for p in psutil.Process(self.sup.procs[service].pid).children(recursive=True)
                if p.name() == "node"
            ]
        return [psutil.Process(self.sup.procs[name].pid)]


def _main_child(part: Any) -> psutil.Process:
    """The server under a part's watchdog (the JVM, the postmaster)."""
    (child,) = psutil.Process(part._proc.pid).children()
    return child


async def retried(ok: set[str | int], call: Any, *args: Any, **kwargs: Any) -> httpx.Response:
    """A call again and again (same Idempotency-Key, same instance ID) until it is answered for good:
    a status in `ok`, or a Problem whose code is."""
    deadline = time.monotonic() + 180
    while True:
        try:
            response: httpx.Response = await call(*args, **kwargs)
            if response.status_code in ok or (response.status_code >= 400 and response.json().get("code") in ok):
                return response
            assert response.status_code in (429, 503) or response.json().get("code") == "workflow_not_ready", (
                response.text
            )
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "never answered"
        await asyncio.sleep(0.3)


async def calm_then(run: Any, until: float) -> None:
    await asyncio.sleep(CALM)
    await run(until)


async def workload(
    api: Api, queue: str, flows: Flows, faults: "asyncio.Task[None]"
) -> tuple[dict[str, str], list[str]]:
    """Senders (every fifth message fails for good) and instances, each request sent until accepted,
    from before the first fault to CALM seconds after the last."""
    sent: dict[str, str] = {}
    instances: list[str] = []
    ended: list[float] = []

    def going() -> bool:
        if faults.done() and not ended:
            ended.append(time.monotonic())
        return not ended or time.monotonic() < ended[0] + CALM

    await asyncio.gather(
        *(sender(api, queue, going, f"s{k}", sent) for k in range(3)), starter(flows, going, instances)
    )
    return sent, instances


async def sender(api: Api, queue: str, going: Callable[[], bool], tag: str, sent: dict[str, str]) -> None:
    n = 0
    while going():
        n += 1
        bodies = [("fail" if j == 0 else "ok") + f"-{tag}-{n}-{j}" for j in range(5)]
        ids = (
            await retried(
                {202},
                api.c.post,
                f"/v2/spaces/{api.space}/queues/{queue}/messages",
                headers={**api.h, "Idempotency-Key": f"soak-{tag}-{n}"},
                json={"messages": [{"body": b64(b)} for b in bodies]},
            )
        ).json()["messageIds"]
        sent.update(zip(ids, bodies, strict=True))
        await asyncio.sleep(0.1)


async def starter(flows: Flows, going: Callable[[], bool], instances: list[str]) -> None:
    n = 0
    while going():
        n += 1
        iid = f"soak-{n}"
        await retried({201, "instance_exists"}, flows.create, {"id": iid, "params": {}})
        await retried({202}, flows.event, iid, {"type": "go", "payload": {"k": n}}, key=f"go-{iid}")
        instances.append(iid)
        await asyncio.sleep(0.3)


async def quiet(settings: Settings) -> None:
    """Until the live projections' offsets stand still: the audit compares with a moving target
    otherwise (timers and the engines' own records go on after the last answer)."""
    import psycopg

    last, still = None, 0
    deadline = time.monotonic() + 90
    while still < 3 and time.monotonic() < deadline:
        async with await psycopg.AsyncConnection.connect(settings.database_url) as conn:
            cur = await conn.execute(f'SELECT sum(next_offset) FROM "{settings.db_schema}".projection_offsets')
            now = (await cur.fetchone() or [None])[0]
        still = still + 1 if now == last else 0
        last = now
        await asyncio.sleep(1)


async def committed(settings: Settings, topic: str) -> list[Any]:
    consumer = kafka.new_consumer(settings)
    await consumer.start()
    try:
        tps = await kafka.partitions(consumer, settings.topic(topic))
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        async for batch in kafka.batches(consumer, ends, timeout_ms=500):
            out += [kafka.decode(m.value) for ms in batch.values() for m in ms]
        return out
    finally:
        await consumer.stop()


@asynccontextmanager
async def http(host: Host) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as client:
        yield client


async def settle(api: Api, queue: str, flows: Flows, total: int, instances: list[str]) -> None:
    deadline = time.monotonic() + 240
    while True:
        try:
            s = await api.stats(queue)
            done = s["acknowledged"] + s["deadLettered"] == total and s["inFlight"] == 0
            ends = [(await flows.get(i)).json().get("status") for i in instances]
            if done and all(e == "complete" for e in ends):
                return
        except (httpx.HTTPError, AssertionError, ValueError):
            pass
        assert time.monotonic() < deadline, "the workload never settled"
        await asyncio.sleep(1)


def test_a_mixed_workload_through_random_faults_of_every_part_keeps_every_promise() -> None:
    # QC-43, QC-44, QC-45, QC-48, WF-36, WF-41, WF-46: nothing lost, nothing twice, replay = live.
    with chaos_host() as (host, broker, pg):
        asyncio.run(soak(host, broker, pg))


async def soak(host: Host, broker: KafkaBroker, pg: PostgresServer) -> None:
    space = await new_space(host)
    async with http(host) as client:
        api = Api(client, space)
        queue, dlq, out = await api.queue(), await api.queue(), await api.queue()
        worker = await api.worker(QUEUE_JS)
        await api.consumer(queue, worker, maxRetries=MAX_RETRIES, deadLetterQueue={"resourceUid": dlq})
        flow_worker = await api.worker(source=FLOW_JS, handlers=(), bindings={"OUT": out})
        # A secret handed in once, refused as it must be: it may not reach a log through the faults.
        private = "private-" + uuid.uuid4().hex
        refused = await client.post(
            f"/v2/spaces/{space.name}/resources",
            headers={**api.h, "Idempotency-Key": uuid.uuid4().hex},
            json={"name": "p", "form": QUEUE, "spec": {}, "privateInputs": {"password": private}},
        )
        assert refused.status_code == 400, refused.text
        flows = Flows(
            api, await api.create("soak-flow", WORKFLOW, {"worker": {"resourceUid": flow_worker}, "className": "Flow"})
        )
        driver = Driver(host, broker, pg, random.Random(SEED))
        faults = asyncio.create_task(calm_then(driver.run, time.monotonic() + CALM + SECONDS))
        traffic = asyncio.create_task(workload(api, queue, flows, faults))
        await faults
        sent, instances = await traffic
        await settle(api, queue, flows, len(sent), instances)
        histories = {i: (await flows.history(i)).json()["items"] for i in instances}
    queue_log = [x for x in await committed(host.settings, "queue") if getattr(x, "queueUid", None) in (queue, out)]
    flow_log = await committed(host.settings, "workflow")
    await quiet(host.settings)
    violations = check(sent, instances, queue, out, queue_log, flow_log, histories, sum(driver.faults.values()))
    # A send retried after an answer it never got may append its messages again, with the same IDs
    # (derived from the Idempotency-Key); the engine and the read models take each ID once.
    accepted = collections.Counter(
        x.messageId for x in queue_log if isinstance(x, r.MessageAccepted) and x.queueUid == queue
    )
    again = sum(n - 1 for n in accepted.values())
    audit = await replay_and_compare(host.settings)
    violations += [f"replay: {d}" for d in audit.differences]
    # Issue 20 item 3: no token and no privateInputs in any log, tracebacks of every fault included.
    secrets = {"admin token": host.admin_token, "editor token": space.editor_token}
    secrets |= {"viewer token": space.viewer_token, "privateInputs": private}
    logged = every_log(host, broker, pg)
    violations += [f"{what} in a log" for what, secret in secrets.items() if secret.encode() in logged]
    print(
        f"\nsoak {SECONDS:.0f}s seed {SEED}: {len(sent)} messages, {len(instances)} instances;"
        f" faults {dict(driver.faults)}; appended again under a retried send {again};"
        f" {len(logged) // 1024} KiB of logs searched for {len(secrets)} secrets;"
        f" invariant violations {len(violations)}"
    )
    assert violations == [], violations[:10]


def check(
    sent: dict[str, str],
    instances: list[str],
    queue: str,
    out: str,
    queue_log: list[Any],
    flow_log: list[Any],
    histories: dict[str, list[Any]],
    faults: int,
) -> list[str]:
    """Every invariant of the issue, from the committed records; each breach a line."""
    bad: list[str] = []
    mine = [x for x in queue_log if x.queueUid == queue]
    accepted = [x.messageId for x in mine if isinstance(x, r.MessageAccepted)]
    acked = [m for x in mine if isinstance(x, r.MessagesAcknowledged) for m in x.messageIds]
    dead = [x.messageId for x in mine if isinstance(x, r.MessageDeadLettered)]
    deliveries = collections.Counter(m for x in mine if isinstance(x, r.BatchDelivered) for m in x.messageIds)
    bad += [f"lost {m}" for m in set(sent) - set(accepted)]
    bad += [f"acknowledged twice {m}" for m, n in collections.Counter(acked).items() if n > 1]
    bad += [f"both acked and dead {m}" for m in set(acked) & set(dead)]
    for m, body in sent.items():
        if body.startswith("fail") and (m not in dead or deliveries[m] < 1 + MAX_RETRIES):
            bad.append(f"{m} not dead-lettered after {1 + MAX_RETRIES} deliveries ({deliveries[m]})")
        if body.startswith("ok") and m not in acked:
            bad.append(f"{m} not acknowledged")
    effects = collections.Counter(
        x.body.decode() for x in queue_log if isinstance(x, r.MessageAccepted) and x.queueUid == out
    )
    extra = 0
    for iid in instances:
        attempts = collections.Counter(
            x.name for x in flow_log if isinstance(x, r.StepAttemptCommitted) and x.instanceId == iid and x.kind == "do"
        )
        for name, n in attempts.items():
            ran = effects[f"{iid}|{name}"]
            if ran < n:
                bad.append(f"{iid} {name}: {ran} effects for {n} committed attempts")
            extra += max(0, ran - n)
        seqs = [h["seq"] for h in histories[iid]]
        if seqs != list(range(1, len(seqs) + 1)):
            bad.append(f"{iid}: history has a gap or a fork: {seqs}")
    # Each crash can interrupt at most one effect per live context between effect and commit.
    if extra > faults * max(1, len(instances)):
        bad.append(f"{extra} effects beyond committed attempts for {faults} faults")
    return bad
