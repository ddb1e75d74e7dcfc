"""A Serving processor's generation on the engine shell (`sumi.engines.shell`): a revocation
returns only once the generation has ended, and one that ends any other way ends the replica."""

import asyncio
import contextlib
from typing import Any

from aiokafka import TopicPartition

from sumi.core.config import Settings
from sumi.engines.shell import Shell
from sumi.wire.outbox import Outbox


class _Serving:
    """A processor whose generation only notes how it ended."""

    def __init__(self, ends: BaseException | None = None) -> None:
        self.ends = ends
        self.drained = asyncio.Event()

    def reset(self) -> None:
        pass

    def fold(self, record: Any, key: str) -> None:
        pass

    def capture(self, partition: int, snapshot_id: str) -> tuple[list[Any], int]:
        return [], 0

    async def restore(self, partition: int, chunks: list[Any]) -> None:
        pass

    async def prepare(self, partitions: frozenset[int], stack: contextlib.AsyncExitStack) -> None:
        pass

    async def serve(self, outboxes: dict[int, Outbox]) -> None:
        try:
            if self.ends is not None:
                raise self.ends
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.05)  # stopping its contexts takes a moment
            self.drained.set()

    def take(self, message: Any) -> None:
        pass


def _shell(processor: _Serving) -> Shell:
    settings = Settings("127.0.0.1:1", "postgresql://unused", topic_prefix="t1")
    shell = Shell(settings, "workflow-engine", "t1.workflow.commands", processor)
    assert shell.serves is processor  # no broker here: the generation is started by hand
    return shell


def _start(shell: Shell, processor: _Serving) -> None:
    shell.generation = asyncio.create_task(processor.serve({}))
    shell.generation.add_done_callback(shell._ended)
    shell.serving = frozenset({0})


async def test_a_revocation_returns_only_once_the_generation_has_drained() -> None:
    # WF-46: no context of a revoked partition runs once another replica may be given it
    processor = _Serving()
    shell = _shell(processor)
    _start(shell, processor)
    await asyncio.sleep(0)
    await shell.revoked([TopicPartition("t1.workflow.commands", 0)])
    assert processor.drained.is_set() and not shell.serving and shell.failed is None


async def test_a_failed_generation_ends_the_replica() -> None:
    # WF-46: a generation that fails (a fenced producer) ends the process; its state is rebuilt from the log
    processor = _Serving(RuntimeError("a commit failed"))
    shell = _shell(processor)
    _start(shell, processor)
    await processor.drained.wait()
    await asyncio.sleep(0)
    assert isinstance(shell.failed, RuntimeError) and "a commit failed" in str(shell.failed)


async def test_a_generation_cancelled_from_within_ends_the_replica() -> None:
    # WF-46: only a revocation ends a generation quietly; otherwise its partitions would stay
    # assigned here, their commands read and never decided (seen when a broker died)
    processor = _Serving(asyncio.CancelledError())
    shell = _shell(processor)
    _start(shell, processor)
    await processor.drained.wait()
    await asyncio.sleep(0)
    assert shell.failed is not None and "cancelled from within" in str(shell.failed)
