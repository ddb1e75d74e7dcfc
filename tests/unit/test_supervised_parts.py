"""When the supervisor restarts a part it launched (issue 20 item 0): dead, or silent too long."""

from sumi.host.supervisor import PART_PATIENCE, PART_START, _part_problem, _Watch
from sumi.infra._watched import Watched


class Part(Watched):
    def __init__(self, running: bool, healthy: bool) -> None:
        self.up, self.answers = running, healthy

    def running(self) -> bool:
        return self.up

    def healthy(self) -> bool:
        return self.answers


def test_a_dead_part_is_restarted() -> None:
    # QC-43
    assert _part_problem(Part(False, False), _Watch(started=0), now=1) == "exited"


def test_a_silent_part_is_given_patience_then_restarted() -> None:
    # QC-43: a SIGSTOP of a few seconds is waited out; one that lasts is not.
    watch = _Watch(started=0)
    assert _part_problem(Part(True, True), watch, now=1) is None and watch.answered
    silent = Part(True, False)
    assert _part_problem(silent, watch, now=2) is None
    assert _part_problem(silent, watch, now=2 + PART_PATIENCE / 2) is None
    assert "has not answered" in str(_part_problem(silent, watch, now=2 + PART_PATIENCE))


def test_a_part_still_starting_is_not_wedged_until_it_takes_far_too_long() -> None:
    # QC-43
    assert _part_problem(Part(True, False), _Watch(started=0), now=PART_START / 2) is None
    assert "did not answer" in str(_part_problem(Part(True, False), _Watch(started=0), now=PART_START + 1))
