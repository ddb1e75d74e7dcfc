"""What the observability tests share: the workers they run and a /metrics scrape, parsed."""

from prometheus_client.parser import text_string_to_metric_families

from tests.conformance.kit import Api
from tests.hostkit import Host
from tests.httpkit import auth

PRINTER_JS = r"""
const dec = new TextDecoder();
export default {
  async queue(batch, env) {
    for (const m of batch.messages) {
      const cmd = dec.decode(m.body);
      if (cmd === 'throw') throw new Error('handler threw on purpose');
      if (cmd.startsWith('flood:')) {
        for (let i = 0; i < Number(cmd.slice(6)); i++) console.log('flood', i);
        continue;
      }
      console.log('hello from', m.id);
      console.warn('careful');
    }
  },
};
"""

STEPS_JS = """
export default {};
export class Flow {
  async run(event, step) {
    const one = await step.do("one", async () => ({ n: 1 }));
    await step.sleep("nap", 0);
    return one;
  }
}
"""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(api: Api, host: Host) -> Samples:
    r = await api.c.get("/metrics", headers=auth(host.admin_token))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(r.text)  # raises on anything not Prometheus text
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)
