"""One place every metric goes: a JSONL file always, TensorBoard and W&B when asked.

Keys are namespaced ("reward/mean", "filter/length/passed", "time/learner", ...)
and each sink receives exactly the same keys. The JSONL file is the record the
report reads: one line per ``log`` call, flushed and fsynced so a crash loses at
most the step being written.

Resume and W&B: a run that crashes after logging step N but before the
checkpoint of step N re-runs (and re-logs) the steps after its last checkpoint.
The JSONL file and TensorBoard drop the stale records (``truncate_after`` and
``purge_step``).  W&B cannot take a step back: it ignores a step lower than one
it already has.  So the resumed run continues the *same* W&B run (its id is kept
in ``wandb_run_id.txt``, ``resume="allow"``) and does not send W&B the steps it
already received (the highest is kept in ``wandb_last_step.txt``); those steps
keep the values from before the crash in W&B (identical with the transformers
generator, whose resumed runs reproduce exactly), and ``metrics.jsonl`` has the
values of the resumed run.  ``wandb_skipped`` counts the records not sent.
"""

from __future__ import annotations

import json
import math
import netrc
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from serl import DataError

METRICS_FILE = "metrics.jsonl"
WANDB_ID_FILE = "wandb_run_id.txt"
WANDB_STEP_FILE = "wandb_last_step.txt"  # the highest step sent to W&B
# Fields of a JSONL line that are not metrics.
META_KEYS = ("step", "wall_time")
LOGGING_EXTRA = "pip install 'serl[logging]'"


class MissingLoggingPackage(ImportError):
    """An optional sink was asked for but its package is not installed."""


def _need(package: str, what: str) -> None:
    raise MissingLoggingPackage(
        f"{what} needs the '{package}' package, which is not installed; "
        f"install it with {LOGGING_EXTRA} (or pip install {package})"
    )


def check_key(key: Any) -> str:
    """A metric key must be 'namespace/name' with non-empty parts."""
    if not isinstance(key, str) or "/" not in key or key.startswith("/") or key.endswith("/"):
        raise ValueError(f"metric key {key!r} is not of the form 'namespace/name' (e.g. 'reward/mean')")
    return key


def to_number(key: str, value: Any) -> float | int:
    """bool/int stay exact ints; everything else numeric becomes a float."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    try:
        if hasattr(value, "item"):  # numpy scalars and 0-d tensors
            value = value.item()
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"metric {key!r} has non-numeric value {value!r}") from None


def jsonl_value(value: float | int) -> float | int | None:
    """NaN and infinities are not valid JSON: they are written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_steps(path: Path) -> list[tuple[int, str]]:
    """(step, raw line) for every complete, parseable line of a metrics file.

    A last line without its newline is what a crash mid-write leaves; it is
    dropped. Any other bad line is an error naming the file and line.
    """
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    torn_tail = not text.endswith("\n") and text != ""
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step = record["step"]
            if not isinstance(step, int) or isinstance(step, bool):
                raise ValueError("'step' is not an integer")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            if torn_tail and number == len(lines):
                break
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
            raise DataError(
                f"{path}:{number}: bad metrics line ({why}); remove that line or restore the file from a copy"
            ) from None
        out.append((step, line))
    return out


def wandb_mode(env: Mapping[str, str] | None = None, netrc_path: str | os.PathLike | None = None) -> str:
    """'online' only when the user gave W&B a key; otherwise 'offline'.

    WANDB_MODE, when set, wins. A key counts when WANDB_API_KEY is set or
    `wandb login` stored one in ~/.netrc for the W&B host.
    """
    env = os.environ if env is None else env
    if env.get("WANDB_MODE"):
        return env["WANDB_MODE"]
    if env.get("WANDB_API_KEY"):
        return "online"
    host = env.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0].split(":")[0]
    path = netrc_path if netrc_path is not None else env.get("NETRC", Path.home() / ".netrc")
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        entry = None
    return "online" if entry and entry[2] else "offline"


class MetricsLogger:
    """Writes metrics to RUN_DIR/metrics.jsonl and, when asked, TensorBoard and W&B.

    On resume, call ``truncate_after(last_completed_step)`` before logging so
    the stale lines of the steps that will be re-run are dropped.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        tensorboard_dir: str | None = None,
        use_wandb: bool = False,
        wandb_project: str = "serl",
        wandb_run_name: str | None = None,
        config: dict | None = None,
        resume: bool = False,
    ) -> None:
        # Missing optional packages are reported before anything is written.
        self.tensorboard_dir = tensorboard_dir
        self._tb = None
        if tensorboard_dir is not None:
            try:
                import tensorboard  # noqa: F401  (torch's writer needs it)
                from torch.utils.tensorboard import SummaryWriter  # noqa: F401
            except ImportError:
                _need("tensorboard", "TensorBoard logging (tensorboard_dir)")
        if use_wandb:
            try:
                import wandb  # noqa: F401
            except ImportError:
                _need("wandb", "Weights & Biases logging (use_wandb)")

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / METRICS_FILE
        self.resume = resume
        if not resume and self.path.exists() and self.path.stat().st_size > 0:
            raise FileExistsError(
                f"{self.path} already holds metrics; pass resume=True to continue that run or use a new run dir"
            )
        existing = read_steps(self.path) if resume else []
        self._last_step = max((s for s, _ in existing), default=None)
        if resume:
            # Rewrite without a torn tail so appends start on a fresh line.
            self._rewrite([line for _, line in existing])
        self._file = open(self.path, "a", encoding="utf-8")
        self._closed = False

        self._wandb_run: Any = None
        self._wandb_had = -1  # steps up to this one reached W&B before this process started
        self._wandb_sent = -1
        self.wandb_skipped = 0
        if use_wandb:
            try:
                self._wandb_run = self._start_wandb(wandb_project, wandb_run_name, config)
            except BaseException:
                self._file.close()
                raise

    # -- sinks -------------------------------------------------------------

    def _start_wandb(self, project: str, name: str | None, config: dict | None):
        import wandb

        # The run id is kept in the run dir so a resumed run continues the same W&B run.
        id_file = self.run_dir / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if (self.resume and id_file.exists()) else None
        run = wandb.init(
            project=project,
            name=name,
            id=run_id,
            resume="allow" if self.resume else None,
            config=config or {},
            mode=wandb_mode(),  # type: ignore[arg-type]  # one of W&B's modes (wandb_mode checks it)
            # W&B files go in the run dir unless the user set WANDB_DIR.
            dir=None if os.environ.get("WANDB_DIR") else str(self.run_dir),
        )
        id_file.write_text(run.id + "\n")
        if self.resume:
            step_file = self.run_dir / WANDB_STEP_FILE
            try:
                self._wandb_had = int(step_file.read_text().strip())
            except (OSError, ValueError):  # none yet, or torn by a crash: W&B's own count below
                self._wandb_had = -1
            self._wandb_had = max(self._wandb_had, int(getattr(run, "step", 0) or 0) - 1)
        return run

    def _send_wandb(self, step: int, values: dict) -> None:
        if step <= self._wandb_had:  # W&B has this step from before the crash and ignores it
            self.wandb_skipped += 1
            return
        self._wandb_run.log(values, step=step)
        if step != self._wandb_sent:
            self._wandb_sent = step
            tmp = self.run_dir / (WANDB_STEP_FILE + ".tmp")
            tmp.write_text(f"{step}\n")
            os.replace(tmp, self.run_dir / WANDB_STEP_FILE)

    def _tb_writer(self, first_step: int):
        if self._tb is None:
            from torch.utils.tensorboard import SummaryWriter

            # purge_step makes TensorBoard hide events a crashed run wrote past the resume point.
            self._tb = SummaryWriter(self.tensorboard_dir, purge_step=first_step if self.resume else None)
        return self._tb

    # -- API ---------------------------------------------------------------

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Write one step's metrics to every sink (the JSONL line is fsynced)."""
        if self._closed:
            raise RuntimeError("MetricsLogger.log called after close()")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise ValueError(f"step must be a non-negative int, got {step!r}")
        if self._last_step is not None and step < self._last_step:
            raise ValueError(f"step {step} is before the last logged step {self._last_step}")
        values = {check_key(k): to_number(k, v) for k, v in metrics.items()}

        record: dict[str, Any] = {"step": step, "wall_time": round(time.time(), 3)}
        record.update((k, jsonl_value(v)) for k, v in values.items())
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._last_step = step

        if self.tensorboard_dir is not None:
            writer = self._tb_writer(step)
            for key, value in values.items():
                writer.add_scalar(key, value, step)
            writer.flush()
        if self._wandb_run is not None:
            self._send_wandb(step, dict(values))

    def truncate_after(self, step: int) -> int:
        """Drop JSONL lines with a step greater than ``step``; returns how many were dropped.

        Call it with the last step the checkpoint completed: the resumed run
        logs from ``step + 1`` on, so its metrics continue without duplicates.
        """
        if self._closed:
            raise RuntimeError("MetricsLogger.truncate_after called after close()")
        kept, dropped = [], 0
        for s, line in read_steps(self.path):
            if s <= step:
                kept.append(line)
            else:
                dropped += 1
        self._file.close()
        self._rewrite(kept)
        self._file = open(self.path, "a", encoding="utf-8")
        self._last_step = max((s for s, _ in read_steps(self.path)), default=None)
        return dropped

    def _rewrite(self, lines: list[str]) -> None:
        # Write-then-rename so a crash here never leaves a half-truncated file.
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb_run is not None:
            self._wandb_run.finish()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
