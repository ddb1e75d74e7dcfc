"""A test kit for people who write workers, and for this project's own tests.

Loaded by pytest wherever sumi is installed (entry point `pytest11`), it starts nothing
until a test asks for one of its fixtures:

- `sumi_host` (session): a running Host, on SUMI_KAFKA_BOOTSTRAP / SUMI_DATABASE_URL when
  set, else testcontainers (`apache/kafka`, `postgres`) where a Docker engine answers, else
  the local launchers `sumi up` uses; its topics and schema are its own.
- `sumi_space` (each test): a fresh Space on it, with helpers to apply manifests, deploy a
  directory, send messages, start instances, send events and wait for outcomes.

```python
def test_orders(sumi_space):
    sumi_space.apply("examples/workflow-js/sumi.yaml")
    iid = sumi_space.start("order-js", {"sku": "tea"})
    sumi_space.event("order-js", iid, "approved", {"by": "ann"})
    assert sumi_space.wait_instance("order-js", iid)["output"]["approvedBy"] == "ann"
```
"""

from sumi.testing._host import Host, new_settings, running_host, start_host
from sumi.testing._infra import database_url, kafka_bootstrap
from sumi.testing._space import Space, new_space, wait_for

__all__ = [
    "Host",
    "Space",
    "database_url",
    "kafka_bootstrap",
    "new_settings",
    "new_space",
    "running_host",
    "start_host",
    "wait_for",
]
