"""How the instruction appended to each problem (``--system_prompt``) shapes short rollouts.

Samples ``--n`` answers per seed problem at ``--max_new_tokens`` (the quickstart's rollout
settings) for each suffix and prints, per suffix: the share of responses cut off by the token
limit, the share with a complete ``\\boxed{}``, the mean length, the sample accuracy against
the seed labels and the majority vote's accuracy. Generation only (no training):

    nice -n 10 .venv/bin/python scripts/measure_prompt_suffix.py --problems 64

The quickstart's default suffix was chosen from this measurement (README, quickstart).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = {
    "step_by_step": "Please reason step by step, and put your final answer within \\boxed{}.",
    "short_boxed": "Answer briefly, and put your final answer within \\boxed{}.",
    "none": "",
}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default=str(ROOT / "dataset/arith_seed.jsonl"))
    ap.add_argument("--problems", type=int, default=64, help="first N seed problems")
    ap.add_argument("--n", type=int, default=8, help="answers per problem")
    ap.add_argument("--max_new_tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--generator", default="vllm", choices=("vllm", "hf"))
    ap.add_argument("--suffixes", default=",".join(SUFFIXES), help="names among " + ", ".join(SUFFIXES))
    args = ap.parse_args(argv)

    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator
    from serl.models.resolve import load_tokenizer, resolve_model
    from serl.rewards.extract import extract_answer, last_boxed

    rows = [json.loads(line) for line in Path(args.seeds).read_text().splitlines() if line.strip()]
    rows = rows[: args.problems]
    path = resolve_model("smollm2")
    tok = load_tokenizer(path)
    gen = make_generator(args.generator, path, tok, seed=0, max_model_len=1024)
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=1.0)
    try:
        for name in args.suffixes.split(","):
            sp = SUFFIXES[name]
            prompts = [tok.apply_chat_template([{"role": "user", "content": f"{r['problem']}\n{sp}" if sp
                                                 else r["problem"]}], add_generation_prompt=True, tokenize=False)
                       for r in rows]
            t0 = time.perf_counter()
            groups = gen.generate(prompts, args.n, sampling)
            secs = time.perf_counter() - t0
            comps = [c for g in groups for c in g]
            correct, maj = [], []
            for r, g in zip(rows, groups):
                answers = [extract_answer(c.text, "number") for c in g]
                ok = [a is not None and a.strip() == str(r["answer"]) for a in answers]
                correct += ok
                votes = Counter(a.strip() for a in answers if a is not None)
                maj.append(bool(votes) and votes.most_common(1)[0][0] == str(r["answer"]))
            print(json.dumps({
                "suffix": name, "problems": len(rows), "n": args.n, "max_new_tokens": args.max_new_tokens,
                "truncated_frac": round(sum(c.finish_reason == "length" for c in comps) / len(comps), 3),
                "boxed_frac": round(sum(last_boxed(c.text) is not None for c in comps) / len(comps), 3),
                "length_mean": round(statistics.mean(len(c.token_ids) for c in comps), 1),
                "sample_acc": round(sum(correct) / len(correct), 3),
                "maj_acc": round(sum(maj) / len(maj), 3), "seconds": round(secs, 1)}), flush=True)
    finally:
        gen.close()


if __name__ == "__main__":
    main()
