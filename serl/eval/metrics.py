"""Accuracy arithmetic shared by the math and MMLU-Pro evaluations."""

from __future__ import annotations

import sys
import time
from collections import defaultdict

from serl.engines.base import Completion, Sampling
from serl.engines.heartbeat import Heartbeat


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c correct (Chen et al. 2021, "Evaluating
    Large Language Models Trained on Code", eq. 1): 1 - C(n-c, k) / C(n, k).
    With k == n it is 1 when any sample is correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def breakdown(keys: list[str | None], columns: dict[str, list[float]]) -> dict[str, dict]:
    """Per key (level, subject, category): n and the mean of each column."""
    rows: dict[str, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        if key is not None:
            rows[key].append(i)
    out = {}
    for key in sorted(rows, key=str):
        idx = rows[key]
        out[key] = {"n": len(idx)} | {name: mean(col[i] for i in idx) for name, col in columns.items()}
    return out


def generate_in_chunks(
    generator, prompts: list, n: int, sampling: Sampling, label: str, chunk: int = 64, log=sys.stderr
) -> list[list[Completion]]:
    """``generator.generate`` over chunks of prompts, with one progress line per chunk and a line
    every ``SERL_PROGRESS_EVERY`` seconds (30) while a chunk runs (a long vLLM call is otherwise silent
    for minutes). Speeds count only what this run generated: a resumed chunk's answers were read back
    (``serl.eval.resume.Resumable.last_fresh``), and its tokens and time are not counted."""
    out: list[list[Completion]] = []
    tokens, busy, read_back = 0, 0.0, 0
    for i in range(0, len(prompts), max(1, chunk)):
        part = prompts[i : i + chunk]
        t0 = time.perf_counter()
        beat = None
        if log is not None:
            done = len(out)
            beat = Heartbeat(
                lambda secs, done=done, k=len(part): print(  # noqa: B008 (binds k now)
                    f"[eval] {label}: {done}/{len(prompts)} prompts, generating the next {k}: {secs:.0f} s so far",
                    file=log,
                    flush=True,
                )
            )
        try:
            groups = generator.generate(part, n, sampling)
        finally:
            if beat is not None:
                beat.stop()
        fresh = getattr(generator, "last_fresh", None) or [True] * len(groups)
        read_back += fresh.count(False)
        if any(fresh):
            busy += time.perf_counter() - t0
        out.extend(groups)
        tokens += sum(
            len(c.token_ids) for g, new in zip(groups, fresh) if new for c in (g[:1] if sampling.greedy else g)
        )
        if log is not None:
            again = f", {read_back} read back from the earlier run" if read_back else ""
            speed = f" ({tokens / busy:.0f} tok/s)" if busy > 0 and tokens else ""
            print(
                f"[eval] {label}: {len(out)}/{len(prompts)} prompts, {tokens} tokens generated{again}, "
                f"{busy:.0f} s{speed}",
                file=log,
                flush=True,
            )
    return out
