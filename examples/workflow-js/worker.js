// A DurableWorkflow with steps, a retry, a sleep and waitForEvent. An order is reserved, then
// priced (a step that fails until 1.5 s after the reservation, whose time the reserve step
// recorded, so the Host retries it by its policy), the workflow sleeps a second, waits for an
// "approved" event, and returns.
export class OrderWorkflow {
  constructor(env) { this.env = env; }

  async run(event, step) {
    const order = event.params ?? {};
    const reserved = await step.do("reserve", async () => ({ sku: order.sku ?? "tea", qty: order.qty ?? 1, at: Date.now() }));
    const priced = await step.do("price", async () => {
      if (Date.now() < reserved.at + 1500) throw new Error("the price list is not out yet");
      return { total: reserved.qty * 4 };
    }, { maxAttempts: 10, initialDelaySeconds: 1, backoff: "constant" });
    await step.sleep("cool-down", 1);
    const approval = await step.waitForEvent("approval", { type: "approved", timeoutSeconds: 3600 });
    return { sku: reserved.sku, qty: reserved.qty, ...priced, approvedBy: approval?.by ?? null };
  }
}
