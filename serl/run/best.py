"""``--save_best METRIC``: keep the policy of the step with the best value of an evaluation metric.

OpenRLHF keeps a best checkpoint by an evaluation key (``--ckpt.best_metric_key``); serl keeps the
policy (Hugging Face layout, as ``RUN_DIR/model``) in ``RUN_DIR/best`` with ``best.json`` saying the
metric, its value and the step. Better means higher unless the metric's name says lower is better
(``serl.report.summary.direction``). Only trained steps compete (not the evaluation before training); a
resumed run reads ``best.json`` and goes on comparing with it. The summary names the step.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from serl import ConfigError

BEST_DIR = "best"
BEST_FILE = "best.json"


def read_best(run_dir: str | Path) -> dict | None:
    """``{"metric", "value", "step"}`` of the kept policy, None when there is none."""
    p = Path(run_dir) / BEST_DIR / BEST_FILE
    return json.loads(p.read_text()) if p.is_file() else None


class BestKeeper:
    def __init__(self, metric: str, run_dir: Path, sign: int = 1):
        """``sign``: +1 when higher is better, -1 when lower is (``serl.report.summary.direction``)."""
        self.metric, self.run_dir = metric, Path(run_dir)
        self.sign = sign or 1
        self.best = read_best(run_dir)

    def check(self, metrics: dict) -> None:
        """Refuse a metric the evaluation does not produce, naming those it does."""
        if self.metric not in metrics:
            have = ", ".join(sorted(metrics)) or "none"
            raise ConfigError(f"save_best: the evaluation has no metric {self.metric!r}; it has: {have}")

    def offer(self, step: int, metrics: dict, learner) -> bool:
        """Keep the policy when ``metrics`` beat the kept one; True when it was kept."""
        self.check(metrics)
        value = float(metrics[self.metric])
        if self.best is not None and not self.sign * (value - self.best["value"]) > 0:
            return False
        final, tmp, old = (self.run_dir / n for n in (BEST_DIR, f".tmp-{BEST_DIR}", f".old-{BEST_DIR}"))
        shutil.rmtree(tmp, ignore_errors=True)
        learner.save(str(tmp), state=False)
        self.best = {"metric": self.metric, "value": value, "step": step}
        (tmp / BEST_FILE).write_text(json.dumps(self.best) + "\n")
        if final.exists():  # swapped by renames: a crash leaves the old or the new one whole
            os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
        return True


def best_line(run_dir: str | Path) -> str | None:
    """The summary's line about the kept policy."""
    b = read_best(run_dir)
    if b is None:
        return None
    return f"best {b['metric']}: {b['value']:.4g} at step {b['step']}, kept in {Path(run_dir) / BEST_DIR}"
