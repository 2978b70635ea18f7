"""Kill an engine's helper processes when their owner dies without closing them.

vLLM runs its engine core and workers as child processes. A clean exit shuts them down,
but a SIGKILL of the owner (an OOM kill, `kill -9`, a scheduler's preemption) leaves
them running, each holding the model and its KV cache. ``Reaper`` starts one small
watchdog process that blocks reading a pipe from the owner. The pipe's write end closes
when the owner dies, however it dies; the watchdog then SIGKILLs the registered
processes (and their children), checking each one's start time so a reused PID is never
hit. ``close()`` tells the watchdog to leave them alone, for a normal shutdown.
"""
from __future__ import annotations

import subprocess
import sys

_WATCHDOG = r"""
import sys, psutil
procs = []
for spec in sys.argv[1:]:
    pid, started = spec.split(":")
    try:
        p = psutil.Process(int(pid))
        if abs(p.create_time() - float(started)) < 1e-3:
            procs.append(p)
    except psutil.Error:
        pass
if sys.stdin.read() != "close":  # EOF without "close": the owner is gone
    for p in procs:
        try:
            victims = p.children(recursive=True) + [p]
        except psutil.Error:
            continue
        for v in victims:
            try:
                v.kill()
            except psutil.Error:
                pass
"""


class Reaper:
    """Watches this process; if it dies, kills ``pids`` (by default: all its children now)."""

    def __init__(self, pids: list[int] | None = None):
        import psutil  # a dependency of vLLM, the one engine that needs this

        specs, self.pids = [], []
        for p in psutil.Process().children(recursive=True) if pids is None else pids:
            try:
                proc = p if isinstance(p, psutil.Process) else psutil.Process(p)
                specs.append(f"{proc.pid}:{proc.create_time()!r}")
                self.pids.append(proc.pid)
            except psutil.NoSuchProcess:  # gone already: nothing to watch
                pass
        self._proc = subprocess.Popen([sys.executable, "-c", _WATCHDOG, *specs], stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)  # a Ctrl-C to the owner's group spares it

    def close(self) -> None:
        """A normal shutdown: the watchdog exits and kills nothing."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.write(b"close")
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
