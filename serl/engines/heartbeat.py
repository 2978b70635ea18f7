"""A line every ``SERL_PROGRESS_EVERY`` seconds (30) while a long call runs: ``Heartbeat`` calls
``say(seconds so far)`` on a daemon thread, so a generate call that reports nothing until it ends
(a vLLM engine's) is never a silence. Open heartbeats nest and only the innermost speaks.

Standard library only: the progress lines of a run (``serl.report.progress``) and of ``serl eval``
(``serl.eval.metrics``) both beat with it.
"""

from __future__ import annotations

import os
import threading
import time


def heartbeat_seconds() -> float:
    return float(os.environ.get("SERL_PROGRESS_EVERY", "30"))


_open: list[object] = []  # the heartbeats now running, outermost first: only the innermost speaks
_lock = threading.Lock()


class Heartbeat:
    """Calls ``say(seconds so far)`` every ``heartbeat_seconds()`` while it is the innermost one open."""

    def __init__(self, say) -> None:
        self.say, self.start = say, time.perf_counter()  # not progress's _clock: tests script that one
        self._stop = threading.Event()
        self._thread = None
        every = heartbeat_seconds()
        if every > 0:
            with _lock:
                _open.append(self)
            self._thread = threading.Thread(target=self._run, args=(every,), daemon=True, name="serl-progress")
            self._thread.start()

    def _run(self, every: float) -> None:
        while not self._stop.wait(every):
            with _lock:
                innermost = bool(_open) and _open[-1] is self
            if innermost:
                self.say(time.perf_counter() - self.start)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            with _lock:
                if self in _open:
                    _open.remove(self)
