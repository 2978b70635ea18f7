"""What a remote reward source gives back (``Reply``), its checks, and the error raised when a
reward does not arrive. Shared by the URL client (serl.rewards.remote) and the reward-file
worker (serl.rewards.reward_file); stdlib only."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


class RemoteRewardError(RuntimeError):
    """A reward that did not arrive (endpoint down, bad reply, a call past its time limit) or a
    reward file that failed. The step that asked for it is not trained."""

    def at_run(self, run_dir) -> "RemoteRewardError":
        """This error with what the run keeps: its newest checkpoint, which the failed step did
        not touch (a checkpoint is written after its step, atomically), and how to go on."""
        from serl.run.checkpoint import checkpoint_step, latest_checkpoint

        ckpt = latest_checkpoint(Path(run_dir))
        if ckpt is None:
            tail = f"no checkpoint had been saved yet in {run_dir} (see --save_steps); nothing to resume"
        else:
            tail = (f"the last checkpoint, {ckpt} (step {checkpoint_step(ckpt)}), is intact: then continue with "
                    f"`serl train --resume {run_dir}`")
        return RemoteRewardError(f"{self}; {tail}")  # one line, as the run's last word


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


