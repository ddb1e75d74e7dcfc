"""The examples, each applied from its own manifest and driven with the test kit (sumi.testing)."""

from pathlib import Path

import pytest

from sumi.testing import Space

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("example, prefix", [("queue-js", ""), ("queue-py", "py-")])
def test_queue_consumer_acknowledges_and_dead_letters(sumi_space: Space, example: str, prefix: str) -> None:
    # QC-9 (dead-letter queue), QC-7 (maxRetries), QC-27 (retry)
    outcomes = sumi_space.apply(EXAMPLES / example / "sumi.yaml")
    assert [o["outcome"] for o in outcomes] == ["created", "created", "created", "created"], outcomes
    sumi_space.send(f"{prefix}orders", "ok:1", "fail:2")
    stats = sumi_space.wait_stats(f"{prefix}orders", acknowledged=1, deadLettered=1, inFlight=0)
    assert stats["retried"] == 2 and stats["ready"] == 0 and stats["inFlight"] == 0, stats
    [dead] = sumi_space.peek(f"{prefix}orders-dead", includeBody="true")
    assert dead["body"] == "ZmFpbDoy"  # "fail:2", its body kept


@pytest.mark.parametrize("example", ["workflow-js", "workflow-py"])
def test_workflow_steps_retry_sleep_and_event(sumi_space: Space, example: str) -> None:
    # WF-18 (create), WF-36 (steps), WF-43 (waitForEvent)
    sumi_space.apply(EXAMPLES / example / "sumi.yaml")
    workflow = "order-js" if example.endswith("js") else "order-py"
    iid = sumi_space.start(workflow, {"sku": "tea", "qty": 3})
    sumi_space.wait_instance(workflow, iid, "waiting")
    sumi_space.event(workflow, iid, "approved", {"by": "ann"})
    done = sumi_space.wait_instance(workflow, iid)
    assert done["status"] == "complete", done
    assert done["output"] == {"sku": "tea", "qty": 3, "total": 12, "approvedBy": "ann"}
    types = [r["type"] for r in sumi_space.history(workflow, iid)]
    assert "RetryScheduled" in types and "SleepScheduled" in types and "EventAccepted" in types, types
