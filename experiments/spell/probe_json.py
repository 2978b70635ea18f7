"""Step-0 probe: how often does the untrained policy write a valid questioner JSON block?

Samples one questioner reply per training cluster (compact or full prompt, the recipe's
chat template and sampling settings) and counts what ``parse_questioner`` makes of it.

    python experiments/spell/probe_json.py --n 30 [--full] [--model smollm2] [--temperature 1.0]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's serl


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--corpus", default="dataset/docs_train.jsonl")
    ap.add_argument("--n", type=int, default=30, help="questioner samples (one per cluster)")
    ap.add_argument("--paragraphs", type=int, default=2, help="paragraphs per questioner prompt")
    ap.add_argument("--full", action="store_true", help="the full prompts instead of the compact ones")
    ap.add_argument("--few_shot", action="store_true", help="prepend the few-shot bootstrap example")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--max_new_tokens", type=int, default=128)
    ap.add_argument("--generator", default="hf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=5, help="print this many raw replies")
    args = ap.parse_args(argv)

    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator
    from serl.models import load_tokenizer, resolve_model
    from serl.data.corpus import read_corpus, sample_evidence
    from serl.recipes.spell.episode import parse_questioner
    from serl.recipes.spell.prompts import questioner_prompt

    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    clusters = read_corpus(args.corpus).clusters
    rng = random.Random(args.seed)
    picked = [clusters[i % len(clusters)] for i in range(args.n)]
    prompts = []
    for c in picked:
        ev = sample_evidence(len(c.paragraphs), args.paragraphs, rng)
        text = questioner_prompt([c.paragraphs[i] for i in ev], compact=not args.full,
                                 few_shot=args.few_shot)
        prompts.append(tok.apply_chat_template([{"role": "user", "content": text}],
                                               add_generation_prompt=True, tokenize=False))
    gen = make_generator(args.generator, path, tok, seed=args.seed)
    groups = gen.generate(prompts, 1, Sampling(args.max_new_tokens, args.temperature, 1.0))
    statuses = Counter(parse_questioner(g[0].text)[0] for g in groups)
    for g in groups[:args.show]:
        print("----\n" + g[0].text, file=sys.stderr)
    out = {"n": len(groups), "compact": not args.full, "few_shot": args.few_shot,
           "temperature": args.temperature, "statuses": dict(statuses),
           "valid_json_rate": (statuses["ok"] + statuses["too_long"]) / len(groups)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
