"""Start an engine's processes in a process group of their own.

A terminal's Ctrl-C goes to its whole foreground process group. vLLM's engine core and workers
treat SIGINT as "shut down", so the engine was gone by the time ``serl train`` wanted to finish its
step and save (and was then reported as a memory failure). Started in their own group, the
engine's processes hear no terminal signal: the run decides when they stop (``close()``), and the
reaper (``serl.engines.reaper``) still kills them if the run dies.

Both of multiprocessing's ways to start a process are covered while ``own_process_group()`` is
open: a forked child moves itself (an at-fork hook), a spawned one is started in a new group
(``posix_spawn(setpgroup=0)`` in place of ``multiprocessing.util.spawnv_passfds``).
"""

from __future__ import annotations

import multiprocessing.util as mp_util
import os
import signal
import threading
from contextlib import contextmanager

from serl.engines import stop

_active = False
_hooked = False


def _after_fork_in_child() -> None:
    if _active:
        try:
            os.setpgid(0, 0)
        except OSError:
            pass


def _spawn_in_new_group(path, args, passfds):
    """``multiprocessing.util.spawnv_passfds``, with the child in a new process group."""
    fds = tuple(sorted(map(int, passfds)))
    was = {fd: os.get_inheritable(fd) for fd in fds}
    for fd in fds:
        os.set_inheritable(fd, True)
    try:
        return os.posix_spawn(path, list(args), dict(os.environ), setpgroup=0)
    finally:
        for fd, inheritable in was.items():
            try:
                os.set_inheritable(fd, inheritable)
            except OSError:
                pass


@contextmanager
def own_process_group():
    """Processes that multiprocessing starts in this block get a process group of their own."""
    global _active, _hooked
    if not hasattr(os, "posix_spawn") or not hasattr(os, "register_at_fork"):
        yield
        return
    if not _hooked:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _hooked = True
    before, mp_util.spawnv_passfds = mp_util.spawnv_passfds, _spawn_in_new_group
    _active = True
    try:
        yield
    finally:
        _active = False
        mp_util.spawnv_passfds = before


def kill_new(pids: set[int]) -> None:
    """SIGKILL ``pids`` and their children: an engine whose start was stopped (Ctrl-C while it loads)
    would otherwise keep the model in memory, or keep this process from exiting."""
    try:
        import psutil
    except ImportError:
        return
    victims = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            if any("resource_tracker" in a for a in p.cmdline()):  # multiprocessing's own, shared
                continue
            victims += [*p.children(recursive=True), p]
        except psutil.Error:
            pass
    for v in victims:
        try:
            v.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=5)


@contextmanager
def stop_ends_start(before: set[int], children):
    """While an engine starts: Ctrl-C or SIGTERM ends the start at once. vLLM's start-up wait swallows
    an exception raised from a signal handler, so the handler kills the processes being started
    instead (their start then fails) and the block raises ``serl.engines.stop.Stop`` when it ends.
    ``children()``: this process's children now. Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[str] = []

    def on_signal(signum, frame):
        got.append(stop.signal_name(signum))
        stop.received = stop.received or got[0]
        kill_new(children() - before)

    previous = {s: signal.signal(s, on_signal) for s in stop.SIGNALS}
    try:
        yield
    except BaseException:
        if got:
            raise stop.Stop(got[0]) from None
        raise
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if got:
        raise stop.Stop(got[0])
