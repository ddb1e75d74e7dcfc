// hello-queue: the smallest useful worker. It greets every message it is handed
// and acknowledges it, so the queue forgets it (AtLeastOnceQueue 0.2.0).
import { greeting } from "./greeting.js";

export default {
  async queue(batch, env, ctx) {
    for (const msg of batch.messages) {
      const text = new TextDecoder().decode(msg.body);
      console.log(greeting(env.GREETING, text), `(attempt ${msg.attempts})`);
      await batch.acknowledge(msg.id);
    }
  },
};
