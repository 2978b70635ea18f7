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

def _rewards_of(value, n: int, where: str) -> list[float]:
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


def _logs_of(value, n: int) -> dict[str, list]:
    logs = {}
    for k, v in (value or {}).items() if isinstance(value, dict) else ():
        v = v.tolist() if hasattr(v, "tolist") else v
        if isinstance(v, list) and len(v) == n:
            logs[str(k)] = v
    return logs


