"""The stop half both launchers share: a server started under its lifeline watchdog."""

import shutil
import subprocess
from pathlib import Path
from typing import Self

from sumi.infra.lifeline import stop_watched


class Watched:
    """Subclasses set `_proc` when they launch, and `_scratch` to a folder of their own making
    (removed on stop) or None when the caller named the data folder (kept)."""

    _proc: "subprocess.Popen[bytes] | None" = None
    _scratch: Path | None = None

    def start(self) -> Self:
        raise NotImplementedError

    def launch(self) -> None:
        raise NotImplementedError

    def healthy(self) -> bool:
        """Whether the server answers its own protocol now (sumi.infra._probe)."""
        raise NotImplementedError

    def running(self) -> bool:
        """Whether its process (the watchdog, which lives exactly as long as the server) is up."""
        return self._proc is not None and self._proc.poll() is None

    def relaunch(self) -> None:
        """Stop what is left of it (a wedged server too: the watchdog kills its group) and launch it
        again on the same data directory and ports; `wait_started` or `healthy` tell when it is back."""
        stop_watched(self._proc)
        self._proc = None
        self.launch()

    def terminate(self) -> None:
        """Ask it to stop without waiting (`stop` waits): the broker and the database stop side by side."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()

    def stop(self) -> None:
        stop_watched(self._proc)
        self._proc = None
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
