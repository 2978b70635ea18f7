"""Stopping a run by signal: Ctrl-C (SIGINT, to this process or the terminal's whole process group)
and SIGTERM (what a scheduler, ``docker stop`` or Kubernetes sends) mean the same.

The first signal asks the run to stop at the next safe point: a step still collecting (rolling out,
rewarding, refilling the instruction pool) touches no weights, so it is abandoned at once and the
run keeps the step before it; a step already updating finishes, and is saved. A second signal stops
at once (``Stop``, a KeyboardInterrupt), from the newest checkpoint. The vLLM engine runs in a
process group of its own (``serl.engines.own_group``), so a terminal's Ctrl-C reaches only us.
"""

from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager

log = logging.getLogger("serl")

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_ACTIVE: CtrlC | None = None  # the run's handler, while one is installed
received: str | None = None  # the first stop signal this process got ("Ctrl-C", "SIGTERM"): for messages


def signal_name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class Stop(KeyboardInterrupt):
    """Stop at once; ``name``: the signal that asked ("Ctrl-C" or "SIGTERM")."""

    def __init__(self, name: str = "Ctrl-C"):
        super().__init__(name)
        self.name = name


class StepAbandoned(BaseException):
    """The first signal arrived while the step was still collecting: it is dropped, untrained.
    A BaseException, so that no ``except Exception`` in a recipe swallows it."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def stop_name(e: BaseException) -> str:
    return getattr(e, "name", None) or received or "Ctrl-C"


def _stop_at_once(signum, frame):
    global received
    received = received or signal_name(signum)
    raise Stop(signal_name(signum))


@contextmanager
def stop_at_once():
    """Before the run's loop (reading data, loading the model, starting the engine): SIGTERM stops at
    once as Ctrl-C does (a ``Stop``). Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, _stop_at_once) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


class CtrlC:
    """The run's handler of SIGINT and SIGTERM (see the module's doc). ``requested``: the name of
    the first signal, or None. Only in the main thread (elsewhere signals cannot be caught)."""

    def __init__(self):
        self.requested: str | None = None
        self.previous: dict = {}
        self.abandonable = False  # the step is collecting: the first signal may drop it

    def __enter__(self):
        global _ACTIVE
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
            _ACTIVE = self
        return self

    def _on_signal(self, signum, frame):
        global received
        name = signal_name(signum)
        if self.requested:
            raise Stop(name)
        self.requested = name
        received = received or name
        for s in SIGNALS:  # the next one stops at once
            signal.signal(s, _stop_at_once)
        if self.abandonable:
            self.abandonable = False
            raise StepAbandoned(name)
        log.warning("%s: stopping after this step, with a checkpoint (%s again to stop at once)", name, name)

    def __exit__(self, *exc):
        global _ACTIVE
        for s, h in self.previous.items():
            signal.signal(s, h)
        self.previous = {}
        if _ACTIVE is self:
            _ACTIVE = None
        return False


@contextmanager
def abandonable():
    """The part of a step that may be dropped on the first signal (collecting: no weights change).
    A signal that came before it drops the step here; one that comes during raises ``StepAbandoned``
    where the code is."""
    ctrl_c = _ACTIVE
    if ctrl_c is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    if ctrl_c.requested:
        raise StepAbandoned(ctrl_c.requested)
    ctrl_c.abandonable = True
    try:
        yield
    finally:
        ctrl_c.abandonable = False
