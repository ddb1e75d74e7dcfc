"""A DurableWorkflow in Python with steps, a retry, a sleep and wait_for_event (waitForEvent):
the price step fails until 1.5 s after the reservation (whose time the reserve step recorded, so
a replay sees the same), and the Host retries it by its policy."""

import time


def _price(reserved):
    if time.time() * 1000 < reserved["at"] + 1500:
        raise RuntimeError("the price list is not out yet")
    return {"total": reserved["qty"] * 4}


class OrderWorkflow:
    def __init__(self, env):
        self.env = env

    async def run(self, event, step):
        order = event.get("params") or {}
        reserved = await step.do(
            "reserve",
            lambda: {"sku": order.get("sku", "tea"), "qty": order.get("qty", 1), "at": int(time.time() * 1000)},
        )
        priced = await step.do("price", lambda: _price(reserved), {"max_attempts": 10, "initial_delay_seconds": 1})
        await step.sleep("cool-down", 1)
        approval = await step.wait_for_event("approval", {"type": "approved", "timeout_seconds": 3600})
        return {"sku": reserved["sku"], "qty": reserved["qty"], **priced, "approvedBy": (approval or {}).get("by")}
