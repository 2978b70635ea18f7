"""Benchmark: serl's majority vote vs a straightforward pairwise O(n^2) vote.

Groups of 16 model-like responses are built from real reference answers
(MATH train and GSM8K test in ../shared/data): the right answer in several
surface forms (verbatim, re-spaced, \\dfrac, decimal, inside a sentence without
a box), wrong answers (the right one perturbed, other problems' answers) and
responses without an answer.  Both implementations get the same responses;
their rewards must be identical.

    python bench/reward_vote.py [--groups 64] [--seed 0] [--data ../shared/data]

Prints a table and appends one JSON line to bench/results.jsonl.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from _common import DATA, RESULTS, machine  # noqa: E402  (also puts the repo on sys.path)
from serl.rewards import EquivalenceChecker, extract_answer, score_groups  # noqa: E402

N = 16


def load_answers(data: Path, limit: int) -> list[str]:
    out = []
    with open(data / "math/train.jsonl") as f:
        for line in f:
            a = json.loads(line)["answer"]
            if len(a) < 40:
                out.append(a)
            if len(out) >= limit * 3 // 4:
                break
    with open(data / "gsm8k/test.jsonl") as f:
        for line in f:
            out.append(json.loads(line)["answer"].rsplit("####", 1)[1].strip().replace(",", ""))
            if len(out) >= limit:
                break
    return out


def variants(ans: str) -> list[str]:
    """Equivalent surface forms of one answer, as a model might write them."""
    forms = ["The answer is $\\boxed{" + ans + "}$.", "so we get \\boxed{ " + ans + " }", "\\boxed{" + ans + "}"]
    forms.append("\\boxed{" + ans.replace("\\frac", "\\dfrac") + "}")
    m = re.fullmatch(r"\\frac\{(\d+)\}\{(\d+)\}", ans)
    if m and int(m.group(2)) in (2, 4, 5, 8, 10):
        forms.append("\\boxed{" + str(int(m.group(1)) / int(m.group(2))) + "}")
    if re.fullmatch(r"-?\d+", ans):
        forms.append(f"Adding up, the total is {ans}")  # no box: last-number fallback
        forms.append("\\boxed{" + ans + ".0}")
    return forms


def perturb(ans: str, rng: random.Random, pool: list[str]) -> str:
    if re.fullmatch(r"-?\d+", ans) and rng.random() < 0.7:
        return "\\boxed{" + str(int(ans) + rng.choice([-2, -1, 1, 2, 10])) + "}"
    return "\\boxed{" + rng.choice(pool) + "}"


def build_groups(answers: list[str], n_groups: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    groups = []
    for g in range(n_groups):
        ans = answers[g % len(answers)]
        n_right = rng.randint(4, 12)
        n_none = rng.randint(0, 2)
        wrong_pool = [perturb(ans, rng, answers) for _ in range(3)]  # models repeat wrong answers
        group = [rng.choice(variants(ans)) for _ in range(n_right)]
        group += ["I could not finish the computation." for _ in range(n_none)]
        group += [rng.choice(wrong_pool) for _ in range(N - len(group))]
        rng.shuffle(group)
        groups.append(group)
    return groups


def pairwise_vote(answers: list[str | None]) -> list[float]:
    """The straightforward way: math-verify every pair, majority = most support.

    Ties: the earliest answer among those with the most support (the same rule
    as serl's "cluster whose first member comes first").
    """
    from math_verify import LatexExtractionConfig, parse, verify

    cfg = [LatexExtractionConfig()]
    n = len(answers)
    eq = [[False] * n for _ in range(n)]
    for i in range(n):
        for j in range(i, n):
            if answers[i] is None or answers[j] is None:
                continue
            same = verify(parse("\\boxed{" + answers[i] + "}", cfg), parse("\\boxed{" + answers[j] + "}", cfg))
            eq[i][j] = eq[j][i] = bool(same)
    support = [sum(row) for row in eq]
    if max(support, default=0) == 0:
        return [0.0] * n
    winner = support.index(max(support))
    return [1.0 if eq[winner][i] else 0.0 for i in range(n)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=64, help="number of 16-sample groups")
    p.add_argument("--seed", type=int, default=0, help="seed for building the groups")
    p.add_argument("--data", default=str(DATA), help="folder with math/ and gsm8k/")
    p.add_argument("--timeout", type=float, default=3.0, help="per-check timeout of the pool")
    p.add_argument("--out", default=str(RESULTS), help="JSONL to append to")
    args = p.parse_args(argv)

    answers = load_answers(Path(args.data), max(args.groups, 8))
    groups = build_groups(answers, args.groups, args.seed)

    t = time.perf_counter()
    base = [pairwise_vote([extract_answer(r) for r in g]) for g in groups]
    t_pair = time.perf_counter() - t

    rows = []
    for workers in (1, 2):
        with EquivalenceChecker(timeout=args.timeout, workers=workers) as ch:
            t = time.perf_counter()
            ch.healthy()
            t_start = time.perf_counter() - t
            score_groups(groups[:2], None, ch)  # warm the parse caches' code paths
            before = dict(ch.stats)
            t = time.perf_counter()
            ours = score_groups(groups, None, ch)
            t_ours = time.perf_counter() - t
            stats = {k: ch.stats[k] - before.get(k, 0) for k in ("verify_calls", "parse_calls", "timeouts")}
        mismatch = [k for k, (a, b) in enumerate(zip(base, ours)) if a != b.rewards]
        assert not mismatch, f"rewards differ in groups {mismatch[:5]}"
        rows.append({"workers": workers, "seconds": t_ours, "pool_start_s": t_start, **stats})

    n_samples = args.groups * N
    print(f"{'implementation':<28}{'seconds':>9}{'ms/group':>10}{'speed-up':>10}")
    print(f"{'pairwise O(n^2), 1 process':<28}{t_pair:>9.2f}{1000 * t_pair / args.groups:>10.1f}{1.0:>10.1f}")
    for r in rows:
        name = f"serl vote, {r['workers']} worker(s)"
        print(f"{name:<28}{r['seconds']:>9.2f}{1000 * r['seconds'] / args.groups:>10.1f}{t_pair / r['seconds']:>10.1f}")
    print(f"{args.groups} groups x {N} = {n_samples} samples; rewards identical in every group;"
          f" math-verify calls (2 workers): {rows[-1]['verify_calls']} verify, {rows[-1]['parse_calls']} parse"
          f" vs {args.groups * N * (N + 1) // 2} pairs for pairwise")

    record = {
        "bench": "reward_vote", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "python": platform.python_version(), "groups": args.groups, "group_size": N,
        "seed": args.seed, "pairwise_s": round(t_pair, 4),
        "serl": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows],
        "speedup_1_worker": round(t_pair / rows[0]["seconds"], 2),
        "speedup_2_workers": round(t_pair / rows[1]["seconds"], 2),
        "rewards_identical": True,
    }
    with open(args.out, "a") as f:
        f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
