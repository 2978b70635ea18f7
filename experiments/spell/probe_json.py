"""Step-0 probe: how often does the untrained policy write a valid questioner JSON block?

Samples one questioner reply per training cluster (never the held-out files) with the
recipe's prompts, chat template and sampling settings, and counts what
``parse_questioner`` makes of it (with ``--prefill`` it reads the prefill plus the reply,
as the recipe does). Prints the valid-JSON rate with its Wilson 95% interval.

    python experiments/spell/probe_json.py --n 30 [--full] [--few_shot] [--prefill]
        [--temperature 1.0] [--stop '}'] [--model smollm2]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]  # this checkout's serl


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--corpus", default="dataset/docs_train.jsonl")
    ap.add_argument("--n", type=int, default=30, help="questioner samples (one per cluster)")
    ap.add_argument("--paragraphs", type=int, default=2, help="paragraphs per questioner prompt")
    ap.add_argument("--full", action="store_true", help="the full prompts instead of the compact ones")
    ap.add_argument("--few_shot", action="store_true", help="prepend the few-shot bootstrap example")
    ap.add_argument("--prefill", action="store_true", help="start the reply with the JSON block's opening")
    ap.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max_new_tokens", type=int, default=128)
    ap.add_argument("--generator", default="hf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=5, help="print this many raw replies")
    ap.add_argument("--dump", default="", help="write every reply (prefill included) to this JSONL file")
    args = ap.parse_args(argv)
    print(json.dumps(run(args)))
    return 0


def run(args) -> dict:
    """The probe's counts (and up to 5 parsed examples) for the parsed arguments."""

    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator
    from serl.eval.stats import wilson
    from serl.models.resolve import load_tokenizer, resolve_model
    from serl.recipes.spell.corpus import read_corpus, sample_evidence
    from serl.recipes.spell.episode import parse_questioner
    from serl.recipes.spell.prompts import QUESTIONER_PREFILL, questioner_prompt

    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    clusters = read_corpus(args.corpus).clusters
    rng = random.Random(args.seed)
    picked = [clusters[i % len(clusters)] for i in range(args.n)]
    prefill = QUESTIONER_PREFILL if args.prefill else ""
    prompts = []
    for c in picked:
        ev = sample_evidence(len(c.paragraphs), args.paragraphs, rng)
        text = questioner_prompt([c.paragraphs[i] for i in ev], compact=not args.full, few_shot=args.few_shot)
        prompts.append(tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=False) + prefill)
    gen = make_generator(args.generator, path, tok, seed=args.seed)
    groups = gen.generate(prompts, 1, Sampling(args.max_new_tokens, args.temperature, 1.0, stop=tuple(args.stop)))
    parsed = [parse_questioner(prefill + g[0].text) for g in groups]
    statuses = Counter(s for s, _ in parsed)
    for g in groups[:args.show]:
        print("----\n" + prefill + g[0].text, file=sys.stderr)
    if args.dump:
        with open(args.dump, "w") as f:
            f.writelines(json.dumps({"text": prefill + g[0].text, "status": s}) + "\n"
                         for g, (s, _) in zip(groups, parsed))
    valid = statuses["ok"] + statuses["too_long"]
    lo, hi = wilson(valid, len(groups))
    out = {"n": len(groups), "compact": not args.full, "few_shot": args.few_shot, "prefill": bool(prefill),
           "stop": args.stop, "temperature": args.temperature, "max_new_tokens": args.max_new_tokens,
           "statuses": dict(statuses), "valid_json": valid, "valid_json_rate": valid / len(groups),
           "wilson95": [round(lo, 3), round(hi, 3)],
           "new_tokens_mean": sum(len(g[0].token_ids) for g in groups) / len(groups),
           "examples": [qa for _, qa in parsed if qa][:5]}
    return out


if __name__ == "__main__":
    sys.exit(main())
