"""Step-0 probe: does the untrained policy write a verdict ([[YES]]/[[NO]]) as the verifier?

The items are labelled verifier items of a corpus generated with another seed than the
shipped files (``make_corpus(seed=--seed_corpus)``), so the held-out verifier file is never
looked at. Each item is judged once with the recipe's compact verifier prompt and chat
template, with and without a prefill of the reply (the parser reads prefill + reply, as the
recipe does). Prints, per variant, the valid-verdict rate and the accuracy on the valid
ones, with Wilson 95% intervals.

    python experiments/spell/probe_verifier.py --n 60 --temperature 0 --prefill '' --prefill '[['
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]  # this checkout's serl; run.py's wilson


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--n", type=int, default=60, help="verifier items (half yes, half no)")
    ap.add_argument("--seed_corpus", type=int, default=7, help="seed of the probe corpus (not the shipped 2025)")
    ap.add_argument("--prefill", action="append", default=None, help="a reply prefill to try (repeatable)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max_new_tokens", type=int, default=48)
    ap.add_argument("--generator", default="hf")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--show", type=int, default=3, help="print this many raw replies per variant")
    args = ap.parse_args(argv)

    from run import wilson

    from serl.data.docs import make_corpus
    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator
    from serl.models import load_tokenizer, resolve_model
    from serl.recipes.spell.prompts import verifier_prompt
    from serl.rewards.judge import parse_judgment

    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    items = make_corpus(n_train=0, n_heldout=max(1, args.n // 10), seed=args.seed_corpus)["verify"][:args.n]
    want = [1 if it["label"] == "yes" else 0 for it in items]
    chats = [tok.apply_chat_template([{"role": "user", "content": verifier_prompt(
        it["question"], it["candidate"], it["gold"], compact=True)}], add_generation_prompt=True, tokenize=False)
        for it in items]
    gen = make_generator(args.generator, path, tok, seed=args.seed)
    for prefill in args.prefill if args.prefill is not None else ["", "[["]:
        groups = gen.generate([c + prefill for c in chats], 1, Sampling(args.max_new_tokens, args.temperature, 1.0))
        got = [parse_judgment(prefill + g[0].text) for g in groups]
        valid = [(j, w) for j, w in zip(got, want) if j != -1]
        right = sum(j == w for j, w in valid)
        for g in groups[:args.show]:
            print(f"---- prefill {prefill!r}\n{prefill}{g[0].text}", file=sys.stderr)
        print(json.dumps({"prefill": prefill, "temperature": args.temperature, "n": len(items),
                          "valid": len(valid), "valid_rate": len(valid) / len(items),
                          "valid_wilson95": [round(x, 3) for x in wilson(len(valid), len(items))],
                          "yes_share": sum(j == 1 for j, _ in valid) / len(valid) if valid else None,
                          "accuracy_all": right / len(items),
                          "accuracy_all_wilson95": [round(x, 3) for x in wilson(right, len(items))]}))
    gen.close() if hasattr(gen, "close") else None
    return 0


if __name__ == "__main__":
    sys.exit(main())
