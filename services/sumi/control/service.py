"""The control processor: its pure decisions inside the engine shell (`sumi.engines.shell`)."""

from collections.abc import Iterable

from sumi.control.rules._decide import decide
from sumi.control.rules.state import ControlState, evolve
from sumi.core import records as r
from sumi.core.config import Settings
from sumi.engines.shell import Shell
from sumi.wire.kafka import Out
from sumi.wire.topics import ADMIN_KEY


class ControlLogic:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state = ControlState()

    def reset(self) -> None:
        self.state = ControlState()

    def fold(self, record: r.Record, key: str = "") -> None:
        evolve(self.state, record)

    def decide(self, record: r.Record, now: int) -> Iterable[Out]:
        if not isinstance(record, r.CommandSubmitted):
            return []
        decision = decide(self.state, record, now)
        key = record.space or ADMIN_KEY
        outs = []
        for event in decision.events:
            evolve(self.state, event)
            outs.append(Out(self.settings.topic("control"), key, event))
        outs += [Out(self.settings.topic("commands"), key, c) for c in decision.followups]
        return outs


def control_shell(settings: Settings) -> Shell:
    # A command is decided against other partitions' state (a token's grant names a Space):
    # one replica holds every partition, the others stand by (sumi.wire.assignors).
    commands, control = settings.topic("commands"), settings.topic("control")
    return Shell(settings, "control", commands, ControlLogic(settings), changelog_topic=control, one_owner=True)


async def serve(settings: Settings) -> None:
    await control_shell(settings).run()
