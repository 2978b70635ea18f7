"""Evaluation: math benchmarks (pass@1, maj@K, pass@K) and MMLU-Pro. ``serl eval --games`` (win rates
against random or a snapshot, Kuhn Poker exploitability) is SPIRAL's evaluation, in ``serl.recipes.spiral.evaluate``.

For training-time evaluation call :func:`evaluate_math` with the trainer's generator,
tokenizer and checker; its ``"metrics"`` are ``eval/<bench>/pass@1``,
``eval/<bench>/maj@K``, ``eval/<bench>/pass@K`` and ``eval/<bench>/mean@K``.
"""

from serl.eval.data import DataError, MathProblem, MMLUQuestion, load_math_benchmark, load_mmlu_pro
from serl.eval.math_bench import build_prompt, evaluate_math
from serl.eval.metrics import pass_at_k
from serl.eval.mmlu_pro import evaluate_mmlu_pro, extract_choice, stratified

__all__ = [
    "DataError",
    "MMLUQuestion",
    "MathProblem",
    "build_prompt",
    "evaluate_math",
    "evaluate_mmlu_pro",
    "extract_choice",
    "load_math_benchmark",
    "load_mmlu_pro",
    "pass_at_k",
    "stratified",
]
