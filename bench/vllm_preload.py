"""Engine settings that might make vLLM-CPU generate faster (issue 46, lever 3).

Sides: ``plain`` (serl's engine as it starts today: eager mode, no preload), ``tcmalloc``
(LD_PRELOAD=libtcmalloc_minimal, which vLLM's CPU backend asks for at every start) and
``compiled`` (enforce_eager off: torch.compile at start-up, once per run). Each runs the
efficacy experiment's rollout call (GSM8K prompts with the experiment's instruction, 8
prompts x 8 samples, up to 384 tokens, temperature 0.8) through serl's VLLMGenerator in a
fresh process, the sides interleaved (plain, tcmalloc, ..., plain, tcmalloc, ...). Each
process makes one warm-up call and --calls timed calls; the table gives each side's median
generated tokens per second, its ratio to plain, and its start-up time.

    python bench/vllm_preload.py --rounds 2 --sides plain,tcmalloc,compiled
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from _common import DATA, append_result, spread

TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"  # Debian's libtcmalloc-minimal4
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def one_side(args) -> None:
    """In the child: time --calls rollout calls and print one JSON line."""
    from serl.engines.base import Sampling
    from serl.engines.vllm_generator import VLLMGenerator
    from serl.models.resolve import resolve_model

    rows = [json.loads(x) for x in open(DATA / "gsm8k" / "train.jsonl", encoding="utf-8")][:args.prompts]
    t0 = time.perf_counter()
    gen = VLLMGenerator(resolve_model(args.model), seed=1, max_model_len=1024, kv_cache_gib=0.5,
                        enforce_eager=not args.compiled)
    start = time.perf_counter() - t0
    tok = gen.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["question"] + "\n" + INSTRUCTION}],
                                       tokenize=False, add_generation_prompt=True) for r in rows]
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=0.8, top_p=1.0)
    gen.generate(prompts, args.samples, sampling)  # warm-up
    rates = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        groups = gen.generate(prompts, args.samples, sampling)
        dt = time.perf_counter() - t0
        rates.append(sum(len(c.token_ids) for g in groups for c in g) / dt)
    gen.close()
    print("RESULT " + json.dumps({"rates": rates, "start_s": start}), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--calls", type=int, default=2, help="timed calls per process (after one warm-up)")
    ap.add_argument("--rounds", type=int, default=2, help="processes per side, the sides interleaved")
    ap.add_argument("--sides", default="plain,tcmalloc", help="of plain, tcmalloc, compiled")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.child:
        one_side(args)
        return 0
    sides = args.sides.split(",")
    if "tcmalloc" in sides and not os.path.exists(TCMALLOC):
        raise SystemExit(f"{TCMALLOC}: not found (apt-get install libtcmalloc-minimal4)")
    child = [sys.executable, __file__, "--child", "--model", args.model, "--prompts", str(args.prompts),
             "--samples", str(args.samples), "--max-new-tokens", str(args.max_new_tokens), "--calls", str(args.calls)]
    rates: dict[str, list[float]] = {s: [] for s in sides}
    starts: dict[str, list[float]] = {s: [] for s in sides}
    for _ in range(args.rounds):
        for side in sides:
            env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
            if side == "tcmalloc":
                env["LD_PRELOAD"] = TCMALLOC
            out = subprocess.run(child + (["--compiled"] if side == "compiled" else []), env=env,
                                 capture_output=True, text=True)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if out.returncode or line is None:
                raise SystemExit(f"{side}: exit {out.returncode}\n{out.stderr[-3000:]}")
            got = json.loads(line[7:])
            rates[side] += got["rates"]
            starts[side].append(got["start_s"])
            print(side, [round(r) for r in rates[side]], f"start {got['start_s']:.0f} s", flush=True)
    med = {k: statistics.median(v) for k, v in rates.items()}
    base = med[sides[0]]
    for k in sides:
        print(f"{k}: median {med[k]:.0f} tokens/s, ratio to {sides[0]} {med[k] / base:.3f}, "
              f"start-up {statistics.median(starts[k]):.0f} s")
    append_result({"bench": "vllm_preload", "model": args.model, "prompts": args.prompts, "samples": args.samples,
                   "max_new_tokens": args.max_new_tokens,
                   "sides": {k: {"tokens_per_s": spread(rates[k]), "ratio": round(med[k] / base, 3),
                                 "start_s": spread(starts[k])} for k in sides}},
                  args.out or os.path.join(os.path.dirname(__file__), "results.jsonl"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
