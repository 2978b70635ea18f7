"""Range checks every numeric option gets, the recipes' own included.

Python's ``float()`` takes ``nan``, ``inf`` and ``1e400`` and ``int()`` takes any
number of digits, so without these a value such as ``--temperature nan`` or
``--seed -1`` went through the parser and failed minutes later, deep in an engine,
with a traceback and a run directory left without a checkpoint.  Each check
here raises ``ConfigError`` naming the option, which ``serl train`` prints as
one line (exit 2) before anything is written.
"""

from __future__ import annotations

import dataclasses
import math

from serl import ConfigError

INT_MAX = 2**31 - 1  # any count or size beyond this is a typo (and overflows C ints)
SEED_MAX = 2**32 - 1  # numpy's and vLLM's seeds are unsigned 32-bit
MAX_SEQUENCES = 2**20  # sequences sampled in one step (rollout_batch_size x n_samples_per_prompt)
MAX_TOKENS = 2**20  # tokens in one prompt or one response

# options in [lo, hi]; a None side is open; (lo, hi, lo_open) where the low end is excluded
_RANGES = {
    "seed": (0, SEED_MAX, False),
    "actor_learning_rate": (0.0, None, False),
    "init_kl_coef": (0.0, None, False),
    "gamma": (0.0, 1.0, False),
    "eps_clip": (0.0, None, True),
    "lr_warmup_ratio": (0.0, 1.0, False),
    "min_lr_ratio": (0.0, 1.0, False),
    "max_norm": (0.0, None, False),
    "verify_timeout": (0.0, None, True),
    "vllm_gpu_memory_utilization": (0.0, 1.0, True),
    "generate_max_len": (None, MAX_TOKENS, False),  # the low end: validate()'s own ">= 1" message
    "prompt_max_len": (None, MAX_TOKENS, False),
    "micro_rollout_batch_size": (1, None, False),
    "max_samples": (0, None, False),
    "eval_samples": (0, None, False),
    "eval_limit": (0, None, False),
    "max_ckpt_num": (0, None, False),
}
for _name in (
    "actor_num_nodes",
    "actor_num_gpus_per_node",
    "ref_num_nodes",
    "ref_num_gpus_per_node",
    "reward_num_nodes",
    "reward_num_gpus_per_node",
    "vllm_num_engines",
):
    _RANGES[_name] = (0, None, False)  # 0 has a meaning for some (a reference inside the learner)
_RANGES["vllm_tensor_parallel_size"] = (1, None, False)


def _show(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def _in_range(name: str, v, lo, hi, lo_open: bool) -> None:
    if lo is not None and (v <= lo if lo_open else v < lo) or hi is not None and v > hi:
        if lo is None:
            rule = f"be at most {_show(hi)}"
        elif hi is None:
            rule = f"be {'>' if lo_open else '>='} {_show(lo)}"
        else:
            rule = f"lie in {'(' if lo_open else '['}{_show(lo)}, {_show(hi)}]"
        raise ConfigError(f"{name}: must {rule}, got {_show(v)}")


def check_numbers(cfg) -> None:
    """Finite floats, ints of sane size, and the known ranges, for every option of ``cfg``."""
    for f in dataclasses.fields(cfg):
        name, v = f.name, getattr(cfg, f.name)
        values = v if isinstance(v, (list, tuple)) else [v]
        for x in values:
            if isinstance(x, bool):
                continue
            if isinstance(x, float) and not math.isfinite(x):
                raise ConfigError(f"{name}: must be a finite number, got {_show(x)}")
            if isinstance(x, int) and name != "seed" and abs(x) > INT_MAX:
                raise ConfigError(f"{name}: {x} is out of range (at most {INT_MAX})")
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if name in _RANGES:
            _in_range(name, v, *_RANGES[name])
        elif f.default == -1:
            continue  # a recipe's "-1 = the common option's value": the recipe checks it (finite above)
        elif name.endswith("top_p"):
            _in_range(name, v, 0.0, 1.0, True)
        elif name.endswith("temperature"):
            _in_range(name, v, 0.0, None, False)
    n = getattr(cfg, "rollout_batch_size", 1) * getattr(cfg, "n_samples_per_prompt", 1)
    if n > MAX_SEQUENCES:
        raise ConfigError(
            f"rollout_batch_size x n_samples_per_prompt: {n} sequences in one step is more than "
            f"any machine holds (at most {MAX_SEQUENCES})"
        )
