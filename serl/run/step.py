"""What one step hands from the recipe to the loop (``Collected``), and the step's clock.

The run loop (``serl.run.loop.Loop.train``) owns the step: it asks the recipe to ``collect``,
updates the learner, syncs the weights, asks the recipe's ``after_update`` and times it all.
A recipe times its own stages with ``timed`` (``time/NAME`` in the step's metrics).
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from serl.engines.base import TrainBatch
from serl.report.progress import heartbeat

log = logging.getLogger("serl")

# The step's wall times by part (logged as time/NAME). A context variable, not the recipe's:
# under --async_train the collect thread fills its own dict while the main thread updates.
_TIMES: ContextVar[dict | None] = ContextVar("serl_step_times", default=None)


@dataclass
class Collected:
    """One step's collect: the batch to train (None: nothing this step), its metrics, and ``local``,
    what this step's ``after_update`` needs from this collect (under --async_train the next
    collect runs before it, so step state is handed over here, never kept on the recipe)."""

    batch: TrainBatch | None
    metrics: dict[str, float] = field(default_factory=dict)
    local: Any = None


def start_times() -> dict:
    """A fresh dict of this thread's (context's) step times, returned."""
    times: dict = {}
    _TIMES.set(times)
    return times


def use_times(times: dict) -> None:
    _TIMES.set(times)


@contextmanager
def timed(name: str, progress: str = "quiet"):
    """Add the block's wall time to the step's ``time/NAME``; a long block says it is still running
    (``serl.report.progress.heartbeat``, plain mode). Outside a step the time goes nowhere."""
    t0 = time.perf_counter()
    try:
        with heartbeat(name, progress):
            yield
    finally:
        times = _TIMES.get()
        if times is not None:
            times[name] = times.get(name, 0.0) + time.perf_counter() - t0


def nothing_to_train(step: int, why: str = "every sample was filtered out or masked") -> None:
    log.warning("step %d: nothing to train on (%s); no update this step", step, why)
