"""Progress for the long stages of a step (rollout, reward, update).

Three modes: "bar" (tqdm bars with throughput, the default on a terminal),
"plain" (one log line per stage with its throughput: the default when stdout is
not a terminal, e.g. CI or `ray job` logs, where redrawn bars turn into noise),
and "quiet".

A stage that runs longer than ``HEARTBEAT_S`` seconds (``SERL_PROGRESS_EVERY``; 30) says so every
``HEARTBEAT_S`` seconds: a plain line ``[rollout] 0/64 samples, 95 s so far``, or a redrawn bar, so a
long generate call (a vLLM engine reports nothing until the call ends) is never a silence.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO

from serl.engines.heartbeat import Heartbeat

MODES = ("bar", "plain", "quiet")
_clock = time.perf_counter  # a name tests can replace


@contextmanager
def heartbeat(name: str, mode: str = "plain", stream: IO | None = None) -> Iterator[None]:
    """A block of work with no count of its own (a recipe's ``timed`` section): in plain mode a line
    ``[name] 95 s so far`` every ``heartbeat_seconds()`` while it runs, nothing when it ends."""
    if progress_mode(mode, stream) != "plain":
        yield
        return
    out = stream if stream is not None else sys.stdout
    beat = Heartbeat(lambda secs: print(f"[{name}] {secs:.0f} s so far", file=out, flush=True))
    try:
        yield
    finally:
        beat.stop()


def progress_mode(mode: str | None = "auto", stream: IO | None = None) -> str:
    """Resolve None/"auto" to "bar" on a TTY and "plain" otherwise; check the rest."""
    if mode is None or mode == "auto":
        out = stream if stream is not None else sys.stdout
        isatty = getattr(out, "isatty", None)
        return "bar" if isatty is not None and isatty() else "plain"
    if mode not in MODES:
        raise ValueError(f"progress mode {mode!r} is not one of auto, {', '.join(MODES)}")
    return mode


def _secs(seconds: float) -> str:
    return f"{seconds:.2f}" if seconds < 10 else f"{seconds:.1f}"


def _rate(n: float, seconds: float) -> str:
    return f"{n / seconds:.1f}" if seconds > 0 else "inf"


class Stage:
    """Counts work done in one stage; the bar (if any) follows the count."""

    def __init__(self, name: str, total: int | None, unit: str, mode: str, stream: IO | None) -> None:
        self.name, self.total, self.unit, self.mode = name, total, unit, mode
        self.n = 0
        self.start = _clock()
        self.seconds = 0.0
        self._stream = stream
        self._bar = None
        if mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=name, unit=unit, leave=False, file=stream, dynamic_ncols=True)
        self._beat = Heartbeat(self._still_running) if mode != "quiet" else None

    def _still_running(self, secs: float) -> None:
        if self._bar is not None:
            self._bar.refresh()  # the elapsed time moves even when the count does not
        else:
            out = self._stream if self._stream is not None else sys.stdout
            done = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
            print(f"[{self.name}] {done} {self.unit}, {secs:.0f} s so far", file=out, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self._bar is not None:
            self._bar.update(n)

    def _finish(self, failed: bool) -> None:
        if self._beat is not None:
            self._beat.stop()
        self.seconds = _clock() - self.start
        if self._bar is not None:
            self._bar.close()
        if self.mode == "plain":
            out = self._stream if self._stream is not None else sys.stdout
            done = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
            status = " (failed)" if failed else ""
            print(
                f"[{self.name}] {done} {self.unit} in {_secs(self.seconds)} s "
                f"({_rate(self.n, self.seconds)} {self.unit}/s){status}",
                file=out,
                flush=True,
            )


@contextmanager
def stage(
    name: str, total: int | None, unit: str = "it", mode: str = "auto", stream: IO | None = None
) -> Iterator[Stage]:
    """``with stage("rollout", total=n, unit="samples", mode=m) as s: ... s.update(k)``"""
    s = Stage(name, total, unit, progress_mode(mode, stream), stream)
    try:
        yield s
    except BaseException:
        s._finish(failed=True)
        raise
    s._finish(failed=False)


def _fmt(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, int):
        return str(value)
    if value != 0 and abs(value) < 0.01:
        return f"{value:.2e}"
    return f"{value:.3f}"


# The step line's metrics when the caller names none (SeRL's, as before recipes had their own).
DEFAULT_LINE = (
    ("reward/mean", "reward"),
    ("reward/agreement", "agree"),
    ("response/truncated_frac", "trunc"),
    ("pool/kept", "kept"),
    ("loss/policy", "loss"),
    ("kl/mean", "kl"),
)


def step_summary(
    step: int, metrics: Mapping[str, float | int | None], line: tuple[tuple[str, str], ...] | None = None
) -> str:
    """One line: the recipe's metrics (``serl.report.panels``; those present), then the step's seconds."""
    parts = [f"step {step}"]
    for key, label in line or DEFAULT_LINE:
        if key == "pool/kept":  # kept of generated (SeRL's pool, or its difficulty filter)
            kept, total = metrics.get("pool/kept"), metrics.get("pool/generated")
            if not total and metrics.get("filter/difficulty/kept") is not None:
                # no problem written this step (arm b, SPIN-style data): the filter's kept of seen groups
                kept = metrics["filter/difficulty/kept"]
                seen = [metrics.get(f"filter/difficulty/{k}") for k in ("kept", "too_easy", "too_hard")]
                counts = [v for v in seen if isinstance(v, (int, float))]
                total = sum(counts) if len(counts) == len(seen) else None
            if kept is not None:
                kept_s = _fmt(kept) if not isinstance(kept, float) or not kept.is_integer() else str(int(kept))
                if total is not None and isinstance(total, (int, float)) and math.isfinite(total):
                    kept_s += f"/{int(total)}"
                parts.append(f"{label} {kept_s}")
        elif key in metrics:
            parts.append(f"{label} {_fmt(metrics[key])}")
    if "time/step" in metrics and metrics["time/step"] is not None:
        parts.append(f"{float(metrics['time/step']):.1f} s")
    return " | ".join(parts)


def print_step_summary(
    step: int,
    metrics: Mapping[str, float | int | None],
    mode: str = "auto",
    stream: IO | None = None,
    line: tuple[tuple[str, str], ...] | None = None,
) -> None:
    """Print the step's one-line summary (nothing in quiet mode)."""
    mode = progress_mode(mode, stream)
    if mode == "quiet":
        return
    text = step_summary(step, metrics, line)
    if mode == "bar":
        from tqdm import tqdm

        tqdm.write(text, file=stream)  # keeps any open bar intact
    else:
        print(text, file=stream if stream is not None else sys.stdout, flush=True)
