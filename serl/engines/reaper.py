"""Kill an engine's helper processes when their owner dies without closing them.

vLLM runs its engine core and workers as child processes. A clean exit shuts them down,
but a SIGKILL of the owner (an OOM kill, `kill -9`, a scheduler's preemption) leaves
them running, each holding the model and its KV cache. ``Reaper`` starts one small
watchdog process that blocks reading a pipe from the owner. The pipe's write end closes
when the owner dies, however it dies; the watchdog then SIGKILLs the registered
processes (and their children), checking each one's start time so a reused PID is never
hit. It also removes what would otherwise stay in RAM: the ``paths`` it was given (the
weight-push directory in /dev/shm) and the /dev/shm segments the killed processes had
mapped (vLLM's message queues). Without this, every OOM-killed run of a 0.5B model left
1.2 GB in /dev/shm, and the next run ran out of memory sooner. ``close()`` tells the
watchdog to leave everything alone, for a normal shutdown.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

_WATCHDOG = r"""
import os, shutil, sys, psutil
specs, paths = sys.argv[1:sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1:]
procs = []
for spec in specs:
    pid, started = spec.split(":")
    try:
        p = psutil.Process(int(pid))
        if abs(p.create_time() - float(started)) < 1e-3:
            procs.append(p)
    except psutil.Error:
        pass
if sys.stdin.read() != "close":  # EOF without "close": the owner is gone
    shm = set()
    for p in procs:
        try:
            victims = p.children(recursive=True) + [p]
        except psutil.Error:
            continue
        for v in victims:
            try:
                shm.update(m.path for m in v.memory_maps() if m.path.startswith("/dev/shm/"))
            except psutil.Error:
                pass
            try:
                v.kill()
            except psutil.Error:
                pass
    for path in [*paths, *sorted(shm)]:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            try:
                os.unlink(path)
            except OSError:
                pass
"""


class Reaper:
    """Watches this process; if it dies, kills ``pids`` (by default: all its children now),
    then removes ``paths`` and the /dev/shm files the killed processes had mapped."""

    def __init__(self, pids: list[int] | None = None, paths: Sequence[str] = ()):
        import psutil  # a dependency of vLLM, the one engine that needs this

        specs, self.pids = [], []
        for p in psutil.Process().children(recursive=True) if pids is None else pids:
            try:
                proc = p if isinstance(p, psutil.Process) else psutil.Process(p)
                specs.append(f"{proc.pid}:{proc.create_time()!r}")
                self.pids.append(proc.pid)
            except psutil.NoSuchProcess:  # gone already: nothing to watch
                pass
        self._proc: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, *specs, "--", *paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # a Ctrl-C to the owner's group spares it

    def close(self) -> None:
        """A normal shutdown: the watchdog exits and kills nothing."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            assert proc.stdin is not None  # opened with stdin=PIPE
            proc.stdin.write(b"close")
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
