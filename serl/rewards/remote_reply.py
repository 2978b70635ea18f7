"""What a remote reward source gives back (``Reply``), its checks, and the error raised when a
reward does not arrive. Shared by the URL client (serl.rewards.remote) and the reward-file
worker (serl.rewards.reward_file); stdlib only."""

from __future__ import annotations

import math
from dataclasses import dataclass


class RemoteRewardError(RuntimeError):
    """A reward that did not arrive (endpoint down, bad reply, a call past its time limit) or a
    reward file that failed. The step that asked for it is not trained."""


@dataclass
class Reply:
    rewards: list[float]
    logs: dict[str, list]


def rewards_of(value, n: int, where: str) -> list[float]:
    if hasattr(value, "tolist"):  # a tensor or an array
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or len(value) != n:
        got = f"{len(value)} entries" if isinstance(value, (list, tuple)) else type(value).__name__
        raise RemoteRewardError(f"{where}: expected 'rewards' with {n} numbers, got {got}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RemoteRewardError(f"{where}: rewards[{i}] is not a finite number ({str(v)[:40]!r})")
        out.append(float(v))
    return out


def logs_of(value, n: int, where: str = "the reward source") -> dict[str, list]:
    """``extra_logs`` as {key: n numbers}. A finite number is one value for every sample;
    anything else that is not n finite numbers is refused naming the source and the key
    (a text value ended the step later with a ValueError traceback)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RemoteRewardError(
            f"{where}: 'extra_logs' must be an object of per-sample numbers, got {type(value).__name__}"
        )
    logs = {}
    for k, v in value.items():
        v = v.tolist() if hasattr(v, "tolist") else v
        if _number(v):
            v = [v] * n
        if not isinstance(v, (list, tuple)) or len(v) != n:
            got = f"{len(v)} entries" if isinstance(v, (list, tuple)) else type(v).__name__
            raise RemoteRewardError(
                f"{where}: extra_logs[{str(k)[:60]!r}] must hold {n} numbers (one per sample), got {got}"
            )
        for i, x in enumerate(v):
            if not _number(x):
                raise RemoteRewardError(
                    f"{where}: extra_logs[{str(k)[:60]!r}][{i}] is not a finite number ({str(x)[:40]!r})"
                )
        logs[str(k)] = list(v)
    return logs


def _number(x) -> bool:
    return isinstance(x, (int, float)) and (isinstance(x, bool) or math.isfinite(x))
