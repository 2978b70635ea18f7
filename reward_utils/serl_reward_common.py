"""Helpers shared by the reward files in this folder (loaded by path, so each
file adds this folder to sys.path before importing it)."""
from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_checker = None


def checker():
    """One process pool per Python process, created on first use."""
    global _checker
    with _lock:
        if _checker is None:
            from serl.rewards import EquivalenceChecker

            _checker = EquivalenceChecker(
                timeout=float(os.environ.get("SERL_REWARD_TIMEOUT", "3")),
                workers=int(os.environ.get("SERL_REWARD_WORKERS", "2")),
            )
        return _checker


def pack(rewards, logs: dict[str, list[float]]):
    """OpenRLHF 0.10+ return value: tensors for rewards, scores and logs."""
    import torch

    r = torch.tensor(rewards, dtype=torch.float32)
    return {
        "rewards": r,
        "scores": r.clone(),
        "extra_logs": {k: torch.tensor(v, dtype=torch.float32) for k, v in logs.items()},
    }
