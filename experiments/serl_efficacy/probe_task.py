"""Choose the training task by probing training problems only (issue 31, part 2).

    python experiments/serl_efficacy/probe_task.py --task gsm8k_2step --out runs/probe/gsm8k_2step.json

For a candidate task, on `--problems` training problems (a seeded sample of the task's
*training* pool; no held-out or transfer problem is read), the untrained model answers
greedily and K times at the training temperature, under the experiment's prompt (chat
template plus the `\\boxed{}` instruction, as `serl eval --prompt_style chat_boxed`). Greedy
decoding is prefix-stable, so one pass at the largest limit gives the numbers at every
smaller limit in `--limits`:

- pass@1, the share of greedy answers cut at the limit, and accuracy among finished answers;
- maj@K (the training vote, `serl.rewards.maj_at_k` rules: empty answers never win) and
  mean sampled accuracy, at the largest limit only (samples are not prefix-stable here).

The task must meet three preconditions (issue 31): finished-answer accuracy in [30%, 70%],
maj@K >= greedy + 3 points, and at most 10% of greedy answers cut.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tasks import TASKS, training_pool  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True, choices=sorted(TASKS))
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--out", required=True, help="JSON file for the summary")
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--limits", default="192,256,320", help="token limits to report; generation uses the largest")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=7, help="which training problems are probed")
    ap.add_argument("--instruction", default=None, help="the instruction after each problem (default: serl eval's "
                    "chat_boxed one, 'Please reason step by step, ...')")
    args = ap.parse_args(argv)

    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator
    from serl.eval.math_bench import BOXED_INSTRUCTION, build_prompt_ids
    from serl.eval.metrics import generate_in_chunks
    from serl.models.resolve import load_tokenizer, resolve_model
    from serl.rewards import EquivalenceChecker
    from serl.rewards.extract import extract_answer
    from serl.rewards.vote import score_groups

    pool = training_pool(args.task)
    rows = random.Random(args.seed).sample(pool, min(args.problems, len(pool)))
    limits = sorted(int(x) for x in args.limits.split(","))
    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    instruction = args.instruction or BOXED_INSTRUCTION
    prompts = [build_prompt_ids(r["question"], tok, "chat_boxed", instruction) for r in rows]
    golds = [r["label"] for r in rows]
    t0 = time.perf_counter()
    gen = make_generator("vllm", path, tok, seed=0)
    try:
        greedy = [g[0] for g in generate_in_chunks(gen, prompts, 1, Sampling(limits[-1], 0.0, 1.0), "greedy",
                                                   chunk=128)]
        t1 = time.perf_counter()
        samples = (generate_in_chunks(gen, prompts, args.k, Sampling(limits[-1], args.temperature, 1.0),
                                      "samples", chunk=32) if args.k else [])
        t2 = time.perf_counter()
    finally:
        gen.close()
    checker = EquivalenceChecker(workers=1)
    try:
        by_limit = {}
        for lim in limits:
            texts, cut = [], []
            for c in greedy:
                over = len(c.token_ids) > lim or (len(c.token_ids) == lim and c.finish_reason == "length")
                cut.append(over)
                texts.append("" if over else c.text)  # a cut answer scores as unanswered
            ok = checker.equal_many([(g, extract_answer(t, "number") if t else None) for g, t in zip(golds, texts)])
            fin = [o for o, c in zip(ok, cut) if not c]
            n = len(rows)
            by_limit[lim] = {"pass@1": sum(ok) / n, "cut": sum(cut) / n, "finished": len(fin),
                             "right_among_finished": sum(fin) / max(1, len(fin)), "right_finished": sum(fin)}
        out = {"task": args.task, "model": args.model, "instruction": instruction, "problems": len(rows), "pool": len(pool), "k": args.k,
               "temperature": args.temperature, "greedy": by_limit,
               "greedy_mean_tokens": sum(len(c.token_ids) for c in greedy) / len(rows),
               "greedy_s": t1 - t0, "sample_s": t2 - t1}
        if samples:
            groups = [[c.text for c in g] for g in samples]
            vote = score_groups(groups, None, checker, mode="majority")
            rule = score_groups(groups, golds, checker, mode="rule")
            labels = [v.label for v in vote]
            right = iter(checker.equal_many([(g, lab) for g, lab in zip(golds, labels) if lab is not None]))
            maj = [bool(next(right)) if lab is not None else False for lab in labels]
            in_band = [0.2 <= sum(s.rewards) / len(s.rewards) <= 0.8 for s in vote]
            out.update({
                f"maj@{args.k}": sum(maj) / len(rows),
                "sample_accuracy": sum(sum(s.rewards) for s in rule) / (len(rows) * args.k),
                "sample_cut": sum(c.finish_reason == "length" for g in samples for c in g) / (len(rows) * args.k),
                "sample_mean_tokens": sum(len(c.token_ids) for g in samples for c in g) / (len(rows) * args.k),
                "vote_agreement": sum(s.agreement for s in vote) / len(rows),
                "kept_by_filter_vote": sum(in_band) / len(rows),
                "vote_right_in_kept": sum(m for m, b in zip(maj, in_band) if b) / max(1, sum(in_band)),
                "sample_tokens_per_s": sum(len(c.token_ids) for g in samples for c in g) / max(t2 - t1, 1e-9),
            })
    finally:
        checker.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
