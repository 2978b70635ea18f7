"""What a model does on the *training* seed problems, before any arm runs: the numbers used to
choose a model's settings without looking at the held-out set.

    python experiments/serl_efficacy/probe.py --model qwen2.5-coder-0.5b --out runs/probe_qwen.json

With the experiment's prompt (the quickstart's short-answer instruction), its token limit and
its temperature: greedy accuracy, `\\boxed{}` rate, length and share cut at the limit; then K
samples per problem, scored as training scores them, and the share of groups the difficulty
filter [0.2, 0.8] would keep under the vote (arms a, b) and under the labels (arm c), and how
often the vote's pseudo-label is the true answer.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--out", required=True, help="JSON file for the summary")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max_len", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--generator", default="vllm", choices=("vllm", "hf"))
    args = ap.parse_args(argv)

    from run import SEEDS, length_flags
    from serl.config.parser import parse_args
    from serl.data.seeds import read_seeds
    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator
    from serl.eval.metrics import generate_in_chunks
    from serl.models.resolve import load_tokenizer, resolve_model
    from serl.rewards import EquivalenceChecker
    from serl.rewards.extract import extract_answer, last_boxed
    from serl.rewards.vote import score_groups

    cfg = parse_args(length_flags())[0]
    seeds = read_seeds(SEEDS, "problem", "answer")
    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    sp = cfg.system_prompt
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"{p.text}\n{sp}"}], add_generation_prompt=True,
                                       tokenize=False) for p in seeds]
    golds = [p.label for p in seeds]
    t0 = time.perf_counter()
    gen = make_generator(args.generator, path, tok, seed=0)
    greedy = [g[0] for g in generate_in_chunks(gen, prompts, 1, Sampling(args.max_len, 0.0, 1.0), "greedy", chunk=128)]
    t1 = time.perf_counter()
    samples = generate_in_chunks(gen, prompts, args.k, Sampling(args.max_len, args.temperature, 1.0), "samples",
                                 chunk=32)
    t2 = time.perf_counter()
    gen.close()
    checker = EquivalenceChecker(workers=1)
    try:
        texts = [c.text for c in greedy]
        ok = checker.equal_many([(g, extract_answer(t, "number")) for g, t in zip(golds, texts)])
        groups = [[c.text for c in g] for g in samples]
        vote = score_groups(groups, None, checker, mode="majority")
        rule = score_groups(groups, golds, checker, mode="rule")
        # is the vote's pseudo-label the true answer? (all groups, and those the filter keeps)
        right = checker.equal_many([(g, v.label) for g, v in zip(golds, vote) if v.label is not None])
        it = iter(right)
        label_ok = [bool(next(it)) if v.label is not None else False for v in vote]
    finally:
        checker.close()
    in_band = lambda s: 0.2 <= sum(s.rewards) / len(s.rewards) <= 0.8  # noqa: E731
    band = lambda scores: sum(map(in_band, scores)) / len(scores)  # noqa: E731
    kept = [ok_ for v, ok_ in zip(vote, label_ok) if in_band(v)]
    n = len(seeds)
    summary = {
        "model": args.model, "problems": n, "k": args.k, "max_len": args.max_len, "temperature": args.temperature,
        "greedy_accuracy": sum(ok) / n, "greedy_boxed": sum(last_boxed(t) is not None for t in texts) / n,
        "greedy_mean_tokens": sum(len(c.token_ids) for c in greedy) / n,
        "greedy_cut": sum(c.finish_reason == "length" for c in greedy) / n,
        "sample_accuracy": sum(sum(s.rewards) for s in rule) / (n * args.k),
        "sample_cut": sum(c.finish_reason == "length" for g in samples for c in g) / (n * args.k),
        "kept_by_filter_vote": band(vote), "kept_by_filter_rule": band(rule),
        "vote_agreement": sum(s.agreement for s in vote) / n,
        "vote_label_correct": sum(label_ok) / n,
        "vote_label_correct_in_kept": sum(kept) / max(1, len(kept)),
        "greedy_s": t1 - t0, "sample_s": t2 - t1,
        "sample_tokens_per_s": sum(len(c.token_ids) for g in samples for c in g) / (t2 - t1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
