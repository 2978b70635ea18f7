"""Step-0 probe: does the untrained policy write a verdict ([[YES]]/[[NO]]) as the verifier?

The items are labelled verifier items of a corpus generated with another seed than the
shipped files (``make_corpus(seed=--seed_corpus)``), so the held-out verifier file is never
looked at. Each item is judged once with the recipe's compact verifier prompt and chat
template, with and without a prefill of the reply (the parser reads prefill + reply, as the
recipe does). Prints, per variant, the valid-verdict rate and the accuracy on the valid
ones, with Wilson 95% intervals.

Calibration against the rule score (issue 33): each item's candidate also gets the recipe's rule
score (cover-EM against the gold, ``serl.recipes.spell.qa.cover_em_many``), the signal the verifier is
trained to agree with. Per variant: the YES share among valid verdicts when the rule says right
and when it says wrong, and their gap. The verifier counts as **calibrated** (``calibrated``, a
rule fixed before any Qwen probe ran) when at most 20% of its verdicts are malformed and its YES
share is at least 0.4 higher on rule-right candidates than on rule-wrong ones; an always-YES
verifier (SmolLM2's) has a gap near 0.

    python experiments/spell/probe_verifier.py --n 60 --temperature 0 --prefill '' --prefill '[['
    python experiments/spell/probe_verifier.py --model qwen2.5-coder-0.5b --n 120 --out runs/spell_qwen/probe_verifier.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE)]  # this checkout's serl


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
    ap.add_argument("--out", default="", help="also write the variants' results (no text) to this JSON file")
    args = ap.parse_args(argv)
    rows = probe(args)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"model": args.model, "n": args.n, "seed_corpus": args.seed_corpus,
                                              "temperature": args.temperature, "variants": rows}, indent=1) + "\n")
    return 0


MAX_BAD_FORMAT, MIN_GAP = 0.2, 0.4


def calibration(got: list[int], rule: list[float]) -> dict:
    """YES share of valid verdicts on rule-right and rule-wrong candidates, and the verdict."""
    def yes_share(want: float):
        v = [j for j, r in zip(got, rule) if j != -1 and r == want]
        return sum(j == 1 for j in v) / len(v) if v else None

    right, wrong = yes_share(1.0), yes_share(0.0)
    gap = None if right is None or wrong is None else right - wrong
    bad = sum(j == -1 for j in got) / len(got)
    return {"rule_right": sum(r == 1.0 for r in rule), "yes_if_rule_right": right, "yes_if_rule_wrong": wrong,
            "gap": gap, "agree_with_rule": sum(j == r for j, r in zip(got, rule)) / len(got), "bad_format": bad,
            "calibrated": gap is not None and bad <= MAX_BAD_FORMAT and gap >= MIN_GAP}


def probe(args) -> list[dict]:

    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator
    from serl.eval.stats import wilson
    from serl.models.resolve import load_tokenizer, resolve_model
    from serl.recipes.spell.docs import make_corpus
    from serl.recipes.spell.judge import parse_judgment
    from serl.recipes.spell.prompts import verifier_prompt
    from serl.recipes.spell.qa import cover_em_many

    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    items = make_corpus(n_train=0, n_heldout=max(1, args.n // 10), seed=args.seed_corpus)["verify"][:args.n]
    want = [1 if it["label"] == "yes" else 0 for it in items]
    rule = cover_em_many([str(it["candidate"]) for it in items], [str(it["gold"]) for it in items])
    rows = []
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
        row = {"prefill": prefill, "temperature": args.temperature, "n": len(items),
               "valid": len(valid), "valid_rate": len(valid) / len(items),
               "valid_wilson95": [round(x, 3) for x in wilson(len(valid), len(items))],
               "yes_share": sum(j == 1 for j, _ in valid) / len(valid) if valid else None,
               "accuracy_all": right / len(items),
               "accuracy_all_wilson95": [round(x, 3) for x in wilson(right, len(items))],
               **calibration(got, rule)}
        rows.append(row)
        print(json.dumps(row))
    gen.close() if hasattr(gen, "close") else None
    return rows


if __name__ == "__main__":
    sys.exit(main())
