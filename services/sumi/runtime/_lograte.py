"""How much a context may print: a token bucket per context, and the count of what it dropped.

Kept on the Host's side of the channel, not in the runtime process: a Python worker owns its
child process, so a limit inside it would be its own to lift. A worker printing in a loop
spends its own CPU budget; what it prints past the bucket costs the Host one frame parse and
a counter, never a log record.
"""

from dataclasses import dataclass

RATE_PER_S = 100.0  # lines a context may keep printing per second
BURST = 500  # lines it may print at once after a quiet spell


@dataclass
class LogBucket:
    rate: float = RATE_PER_S
    burst: float = BURST
    tokens: float = BURST
    at: float | None = None  # monotonic seconds of the last refill
    dropped: int = 0  # lines refused since the last drop notice

    def admit(self, now: float) -> bool:
        """Whether one more line may go out now; a refused one is counted."""
        if self.at is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.dropped += 1
        return False

    def take_dropped(self) -> int:
        """The lines dropped since the last call: what the next drop notice says."""
        n, self.dropped = self.dropped, 0
        return n


def drop_notice(n: int) -> str:
    return f"{n} log line{'s' if n != 1 else ''} dropped (over {RATE_PER_S:g} lines/s, burst {BURST})"


def outcome_line(op: str, reply: dict[str, object]) -> str | None:
    """What an invocation's reply tells the worker's log: its uncaught error, or its stop."""
    if op == "invoke_queue" and not reply.get("ok"):
        error = reply.get("error")
        return _failure(str(reply.get("reason") or "threw"), error if isinstance(error, dict) else {})
    if op == "invoke_workflow" and reply.get("kind") in ("errored", None, "stopped"):
        if reply.get("kind") is None:  # a queue-shaped stop notice
            error = reply.get("error")
            return _failure(str(reply.get("reason") or "stopped"), error if isinstance(error, dict) else {})
        # The message is the instance's own document (WF-21), sealed with its key and purged with
        # it (WF-13, WF-47); the log topic keeps its lines for days, so it names the end only.
        return f"{reply.get('reason') or 'run_threw'} (the message is in the instance's history)"
    return None


def _failure(reason: str, error: dict[str, object]) -> str:
    name, message = error.get("name") or "Error", error.get("message") or ""
    if reason == "threw":
        return f"uncaught {name}: {message}".rstrip(": ")
    return f"stopped: {reason}" + (f" ({message})" if message else "")
