"""Benchmark: time of one majority-vote group against its number of distinct answers.

One group of n responses, every answer distinct, voted by serl's reward pool (the
same call the reward server makes).  Two kinds of answers:

* ``number``: ``\\boxed{k}``, plain integers (the cheap rules decide every pair);
* ``mixed``: half ``\\boxed{k}``, half ``\\boxed{k/7}``-like fractions and decimals,
  also decided by the cheap rules.

    python bench/vote_scaling.py [--sizes 500 1000 2000] [--kind number|mixed]

Prints one line per size (seconds, checks that reached math-verify).
"""
from __future__ import annotations

import argparse
import time

from _common import machine  # noqa: E402  (also puts the repo on sys.path)
from serl.rewards import EquivalenceChecker, score_groups  # noqa: E402


def responses(n: int, kind: str) -> list[str]:
    if kind == "number":
        return ["\\boxed{" + str(k) + "}" for k in range(n)]
    out = []
    for k in range(n):
        out.append("\\boxed{" + (str(k) if k % 3 == 0 else f"\\frac{{{k}}}{{7}}" if k % 3 == 1 else f"{k}.25") + "}")
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    p.add_argument("--kind", choices=("number", "mixed"), default="number")
    args = p.parse_args()
    print(f"# {machine()}")
    with EquivalenceChecker(timeout=3.0, workers=2) as checker:
        checker.healthy()  # start the pool outside the timing
        for n in args.sizes:
            before = dict(checker.stats)
            t = time.perf_counter()
            (g,) = score_groups([responses(n, args.kind)], None, checker)
            dt = time.perf_counter() - t
            assert g.n_clusters == n, g.n_clusters
            print(f"{args.kind} n={n}: {dt:.2f} s, verify_calls {checker.stats['verify_calls'] - before['verify_calls']}",
                  flush=True)


if __name__ == "__main__":
    main()
