"""`sumi up --logs`: every worker line of the Host on the operator's terminal, as it comes."""

import asyncio
import sys
import threading
from typing import Any, TextIO

from aiokafka import AIOKafkaConsumer

from sumi.core.logline import format_line, item
from sumi.core.records import WorkerLogged
from sumi.wire import codec, kafka


class HostLogPrinter:
    """Read straight off the log topic (the operator holds the Host, every Space included), on a
    thread of its own beside `up`'s wait for a stop signal."""

    def __init__(self, settings: Any, out: TextIO = sys.stdout) -> None:
        self._settings = settings
        self._out = out
        self._loop = asyncio.new_event_loop()
        self._task: Any = None
        self.ready = threading.Event()  # positioned at the topic's end: every later line will print
        self._thread = threading.Thread(target=self._run, name="sumi-logs", daemon=True)

    def start(self) -> "HostLogPrinter":
        self._thread.start()
        return self

    def _run(self) -> None:
        self._task = self._loop.create_task(self._follow())
        try:
            self._loop.run_until_complete(self._task)
        except BaseException:  # cancelled by stop(), or the broker went away with the Host
            pass
        finally:
            self._loop.close()

    async def _follow(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self._settings.kafka_bootstrap)
        await consumer.start()
        try:
            topic = self._settings.topic("logs")
            tps = await kafka.partitions(consumer, topic)
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            for tp in tps:
                await consumer.position(tp)
            self.ready.set()
            async for m in consumer:
                rec = codec.decode(m.value) if m.value else None
                if isinstance(rec, WorkerLogged):
                    line = format_line({**item(rec), "text": f"{rec.space}/{rec.workerUid}: {rec.text}"})
                    self._out.write(line + "\n")
                    self._out.flush()
        finally:
            await consumer.stop()

    def stop(self) -> None:
        if self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(5)
