// A queue consumer with a dead-letter queue. Each message is an order as text: "ok:<id>" is
// acknowledged; "fail:<id>" is retried until QueueConsumer's maxRetries is spent, then the
// Host moves it to the dead-letter queue (QC-9), where `sumi queue peek orders-dead` finds it.
export default {
  async queue(batch, env, ctx) {
    for (const msg of batch.messages) {
      const text = new TextDecoder().decode(msg.body);
      if (text.startsWith("fail:")) {
        console.log(`cannot ship ${text.slice(5)} (attempt ${msg.attempts})`);
        await batch.retry(msg.id, 0);
      } else {
        console.log(`shipped ${text.replace(/^ok:/, "")}`);
        await batch.acknowledge(msg.id);
      }
    }
  },
};
