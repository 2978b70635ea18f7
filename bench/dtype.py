"""fp32 against bf16 on this machine: the learner's update and vLLM's generation, per model (issue 59).

Where the CPU has no native bf16 (AVX2 only, AVX-512 without BF16) oneDNN emulates it; this bench says
what that costs here, so that ``--bf16 auto`` / ``--generator_dtype auto`` (serl.engines.precision) can be
checked against a measurement on each machine kind. Emulated bf16 is slow, so the work is small: a
learner update of ``--batch`` synthetic sequences (bench/learner.py's batch; one warm-up update, then
``--steps`` timed ones, the warm-up left out for emulated bf16 with ``--no-warmup-emulated``) and one
generate call of ``--prompts`` SeRL seed problems x ``--samples`` samples of at most ``--max-new-tokens``
tokens, after a warm-up call, in a fresh vLLM engine per dtype.

    python bench/dtype.py --models smollm2,qwen2.5-coder-0.5b      # the table + a JSON line in bench/results.jsonl
"""
from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch

from _common import append_result, math_prompts  # noqa: E402  (also puts the repo on sys.path)

from serl.engines.precision import cpu_hardware  # noqa: E402

DTYPES = {"fp32": ("float32", False), "bf16": ("bfloat16", True)}


def learner_step(path: str, bf16: bool, args, warmup: bool) -> dict:
    from learner import make_batch

    from serl.engines.learner_core import LearnerConfig
    from serl.engines.torch_learner import TorchLearner

    cfg = LearnerConfig(actor_learning_rate=1e-6, lr_warmup_ratio=0.0, total_steps=1000, micro_batch_size=args.batch, bf16=bf16)
    ln = TorchLearner(path, cfg, need_ref=False)
    batch = make_batch(ln, args.batch, args.prompt_len, args.response_len, ln.policy.config.vocab_size, 0)
    if warmup:
        ln.step(batch)
    times = []
    for _ in range(args.steps):
        t = time.perf_counter()
        m = ln.step(batch)
        times.append(time.perf_counter() - t)
        if m["actor/skipped"]:
            raise RuntimeError("the benchmark update was skipped (non-finite)")
    tokens = sum(len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids))
    del ln
    gc.collect()
    med = statistics.median(times)
    return {"step_s": round(med, 3), "step_s_all": [round(x, 3) for x in times], "tokens": tokens,
            "tokens_per_s": round(tokens / med, 2), "warmup": warmup}


def generation(path: str, dtype: str, args) -> dict:
    from serl.engines.base import Sampling
    from serl.engines.factory import make_generator

    gen = make_generator("vllm", path, seed=0, max_model_len=1024, kv_cache_gib=0.5, dtype=dtype)
    try:
        prompts = math_prompts(args.prompts)
        sampling = Sampling(max_new_tokens=args.max_new_tokens, temperature=1.0)
        gen.generate(prompts[:1], 1, Sampling(max_new_tokens=4, temperature=1.0))  # warm-up
        t = time.perf_counter()
        groups = gen.generate(prompts, args.samples, sampling)
        wall = time.perf_counter() - t
    finally:
        gen.close()
    tokens = sum(len(c.token_ids) for g in groups for c in g)
    return {"gen_s": round(wall, 3), "gen_tokens": tokens, "gen_tokens_per_s": round(tokens / wall, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,qwen2.5-coder-0.5b", help="comma list of model specs")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32 and/or bf16")
    ap.add_argument("--parts", default="learner,generation", help="comma list of learner and/or generation")
    ap.add_argument("--batch", type=int, default=2, help="sequences per update (one micro-batch)")
    ap.add_argument("--prompt-len", type=int, default=32, help="mean prompt length of the update (tokens)")
    ap.add_argument("--response-len", type=int, default=32, help="mean response length of the update (tokens)")
    ap.add_argument("--steps", type=int, default=1, help="timed updates per model and dtype")
    ap.add_argument("--no-warmup-emulated", action="store_true",
                    help="no warm-up update for bf16 where it is emulated (it takes minutes there)")
    ap.add_argument("--prompts", type=int, default=8, help="prompts in the generate call")
    ap.add_argument("--samples", type=int, default=2, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=32, help="max new tokens per sample")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    args = ap.parse_args(argv)
    from serl.models.resolve import resolve_model

    hw = cpu_hardware()
    print(f"machine: {hw.summary()}, torch capability {hw.capability}, {torch.get_num_threads()} threads")
    rows = []
    for model in args.models.split(","):
        path = resolve_model(model)
        for name in args.dtypes.split(","):
            dtype, bf16 = DTYPES[name]
            row = {"model": model, "dtype": name}
            if "learner" in args.parts:
                warm = not (bf16 and not hw.bf16_native and args.no_warmup_emulated)
                row.update(learner_step(path, bf16, args, warm))
            if "generation" in args.parts:
                row.update(generation(path, dtype, args))
            print(row, flush=True)
            rows.append(row)
    print(f"\n| model | dtype | update s ({args.batch} seqs) | update tokens/s | generate tokens/s |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['dtype']} | {r.get('step_s', '-')} | {r.get('tokens_per_s', '-')} | "
              f"{r.get('gen_tokens_per_s', '-')} |")
    append_result({"bench": "dtype", "cpu_kind": hw.why, "isa": list(hw.isa), "capability": hw.capability,
                   "threads": torch.get_num_threads(), "args": vars(args), "rows": rows},
                  **({"out": args.out} if args.out else {}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
