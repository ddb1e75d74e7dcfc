"""Bounded memory (issue 17): a queue engine that holds 1 KiB of bodies and 20 settled IDs per
queue still hands every body to its worker byte for byte, acknowledges each message once and
dead-letters the original bytes; the rest is read back from the queue log by offset."""

import base64
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.conformance.kit import Api
from tests.hostkit import Host, new_settings, new_space, running_host

pytestmark = pytest.mark.integration

BUDGET = 1024
MESSAGES = 300

# Reports each message's length and FNV-1a hash (what it was handed), then acknowledges it,
# or retries it when its body says "dead" (so it exhausts its retries and is dead-lettered).
HASHING_JS = r"""
const dec = new TextDecoder();
function fnv(b) {
  let h = 0x811c9dc5;
  for (let i = 0; i < b.length; i++) { h ^= b[i]; h = Math.imul(h, 0x01000193) >>> 0; }
  return h >>> 0;
}
export default {
  async queue(batch, env, ctx) {
    const seen = batch.messages.map((m) => {
      const b = new Uint8Array(m.body);
      return {id: m.id, attempts: m.attempts, len: b.length, fnv: fnv(b)};
    });
    await env.REPORT.send(JSON.stringify(seen));
    for (const m of batch.messages) {
      if (dec.decode(new Uint8Array(m.body).subarray(0, 4)) === 'dead') await batch.retry(m.id);
      else await batch.acknowledge(m.id);
    }
  },
};
"""


def fnv(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def body(n: int) -> bytes:
    """Varied sizes, a twentieth far past the budget, every byte value; 12 of them to dead-letter."""
    kind = b"dead" if n % 50 in (7, 15) else b"ack_"
    size = 2_000 + (n * 997) % 120_000 if n % 15 == 0 else (n * 37) % 600
    return kind + b"%04d" % n + bytes((n * 31 + i * 7) % 256 for i in range(size))


@pytest.fixture(scope="module")
def host(kafka_bootstrap: str, database_url: str) -> Iterator[Host]:
    settings = new_settings(kafka_bootstrap, database_url, queue_body_budget_bytes=BUDGET, queue_settled_window=20)
    with running_host(settings) as h:
        yield h


@pytest.fixture
async def api(host: Host) -> AsyncIterator[Api]:
    space = await new_space(host)
    async with httpx.AsyncClient(base_url=host.url, timeout=60) as client:
        yield Api(client, space)


async def test_bodies_past_the_budget_are_delivered_and_dead_lettered_intact(api: Api) -> None:
    # QC-22, QC-24, QC-31, QC-33, QC-34: original bytes at every delivery and in the dead letter
    q, report, dlq = await api.queue(), await api.queue(), await api.queue()
    bodies = [body(n) for n in range(MESSAGES)]
    assert sum(len(b) > BUDGET for b in bodies) >= 20 and sum(map(len, bodies)) > 500 * BUDGET
    ids: list[str] = []
    for i in range(0, MESSAGES, 25):  # all pending before the worker is attached: the budget fills
        ids += await api.send(q, *bodies[i : i + 25])
    sent = dict(zip(ids, bodies, strict=True))
    dead = {mid for mid, b in sent.items() if b.startswith(b"dead")}
    worker = await api.worker(HASHING_JS, bindings={"REPORT": report})
    await api.consumer(q, worker, maxBatchSize=5, maxRetries=1, deadLetterQueue={"resourceUid": dlq})

    await api.until(q, timeout=240, acknowledged=MESSAGES - len(dead), deadLettered=len(dead), inFlight=0, ready=0)
    seen = await api.reports(report, MESSAGES + len(dead))
    assert all((s["len"], s["fnv"]) == (len(sent[s["id"]]), fnv(sent[s["id"]])) for s in seen)
    # Nothing here fails a batch, so each message is handed over once, a dead one 1 + maxRetries times.
    assert Counter(s["id"] for s in seen) == {mid: 2 if mid in dead else 1 for mid in ids}
    assert Counter(s["attempts"] for s in seen if s["id"] in dead) == {1: len(dead), 2: len(dead)}
    letters = await api.peek(dlq)
    assert sorted(base64.b64decode(m["body"]) for m in letters) == sorted(sent[mid] for mid in dead)
