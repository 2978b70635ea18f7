"""Time the ROUGE-L novelty check per candidate against pools of known problems.

    python -m serl.recipes.serl.instruct.bench_novelty --known FILE.jsonl --sizes 500 5000

Known texts and candidates are real problems read from a JSONL file (``problem``
key); candidates are drawn from rows not in the pool. Prints, per pool size, the
time per candidate of the indexed check and of scoring every pair with rouge-score,
and checks that both give the same decisions.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from rouge_score import rouge_scorer

from serl.data.novelty import RougeIndex
from serl.recipes.serl.instruct.filters import normalize


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--known", required=True, help="JSONL file with a 'problem' field")
    ap.add_argument("--sizes", type=int, nargs="+", default=[500, 5000], help="pool sizes to time")
    ap.add_argument("--candidates", type=int, default=50, help="candidates timed per size")
    ap.add_argument("--brute", type=int, default=10, help="candidates also scored pair by pair")
    ap.add_argument("--threshold", type=float, default=0.7, help="ROUGE-L threshold")
    args = ap.parse_args(argv)
    with open(args.known, encoding="utf-8") as f:
        texts = [normalize(json.loads(line)["problem"]) for line in f if line.strip()]
    rng = random.Random(0)
    rng.shuffle(texts)
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    for size in args.sizes:
        known, rest = texts[:size], texts[size:]
        # half fresh problems, half near copies of known ones (a word changed)
        cands = rest[: args.candidates // 2]
        for t in rng.sample(known, args.candidates - len(cands)):
            w = t.split()
            w[len(w) // 2] = "seven"
            cands.append(" ".join(w))
        t0 = time.perf_counter()
        idx = RougeIndex(args.threshold)
        for t in known:
            idx.add(t)
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        decisions = [idx.too_similar(c)[0] for c in cands]
        t_idx = (time.perf_counter() - t0) / len(cands)
        t0 = time.perf_counter()
        brute = [
            max(scorer.score(k, c)["rougeL"].fmeasure for k in known) > args.threshold + 1e-9
            for c in cands[: args.brute]
        ]
        t_brute = (time.perf_counter() - t0) / max(1, len(brute))
        t0 = time.perf_counter()
        brute_tok = [idx.brute_force_max(c) > args.threshold + 1e-9 for c in cands[: args.brute]]
        t_brute_tok = (time.perf_counter() - t0) / max(1, len(brute_tok))
        agree = decisions[: len(brute)] == brute == brute_tok
        print(
            json.dumps(
                {
                    "pool": size,
                    "candidates": len(cands),
                    "rejected": sum(decisions),
                    "build_s": round(t_build, 3),
                    "indexed_ms_per_cand": round(1e3 * t_idx, 2),
                    "pretokenised_all_pairs_ms_per_cand": round(1e3 * t_brute_tok, 1),
                    "rouge_score_api_all_pairs_ms_per_cand": round(1e3 * t_brute, 1),
                    "same_decisions": agree,
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
