"""Evaluation: math benchmarks (pass@1, maj@K, pass@K) and MMLU-Pro. ``serl eval --games`` (win rates
against random or a snapshot, Kuhn Poker exploitability) is SPIRAL's evaluation, in ``serl.recipes.spiral.evaluate``.

For training-time evaluation call :func:`evaluate_math` with the trainer's generator,
tokenizer and checker; its ``"metrics"`` are ``eval/<bench>/pass@1``,
``eval/<bench>/maj@K``, ``eval/<bench>/pass@K`` and ``eval/<bench>/mean@K``.
"""

from importlib import import_module

# Each public name and its module, imported on first use: serl.eval.stats (standard library only) is
# read by the experiments' table scripts, which must run without torch (math_bench pulls in the engines).
_WHERE = {
    "DataError": "data",
    "MMLUQuestion": "data",
    "MathProblem": "data",
    "load_math_benchmark": "data",
    "load_mmlu_pro": "data",
    "build_prompt": "math_bench",
    "evaluate_math": "math_bench",
    "pass_at_k": "metrics",
    "evaluate_mmlu_pro": "mmlu_pro",
    "extract_choice": "mmlu_pro",
    "stratified": "mmlu_pro",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'serl.eval' has no attribute {name!r}")
    return getattr(import_module(f"serl.eval.{_WHERE[name]}"), name)
