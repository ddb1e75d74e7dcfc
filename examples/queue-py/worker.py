"""A queue consumer with a dead-letter queue, in Python: "ok:<id>" is acknowledged, "fail:<id>"
is retried until maxRetries is spent and then dead-lettered by the Host (QC-9)."""


async def queue(batch, env, ctx):
    for msg in batch.messages:
        text = msg.body.decode("utf-8")
        if text.startswith("fail:"):
            print(f"cannot ship {text[5:]} (attempt {msg.attempts})")
            await batch.retry(msg.id, 0)
        else:
            print(f"shipped {text.removeprefix('ok:')}")
            await batch.acknowledge(msg.id)
