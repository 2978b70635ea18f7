"""Throughput and MFU of a full TorchLearner update on SmolLM2-135M (fp32 and bf16).

``--paths old,new`` times the learner's code paths side by side, in rounds (old, new,
old, new, ...) so that both see the same spells of machine load: ``new``
is the default LearnerConfig (packed micro-batches, blockwise log-softmax, and in bf16
bf16 weights with fp32 masters); ``old`` switches those off (padded micro-batches,
full-size fp32 log-softmax, fp32 weights under bf16 autocast), as before issue 17.

A full update = forward + backward over every micro-batch of the batch, gradient
clipping and the AdamW step. MFU = 6·params·tokens / time / peak, where the peak is the
best dense matmul rate this script measures on this machine in the same run, for the
same dtype (the higher of a reading before and one after the updates). Tokens are prompt + response tokens, no padding.
MFU(cpu) is the same ratio by this process's CPU time on both sides (update and peak):
on a shared machine it leaves out the time other jobs take (most exact with --threads 1).

    python bench/learner.py            # table + a JSON line in bench/results.jsonl
    python bench/learner.py --paths old,new --steps 3   # before/after, interleaved
    python bench/learner.py --help
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics
import time

import torch

from _common import RESULTS, cpu_model  # noqa: E402  (also puts the repo on sys.path)

from serl.engines.base import TrainBatch  # noqa: E402
from serl.engines.learner_core import LearnerConfig  # noqa: E402
from serl.engines.torch_learner import TorchLearner  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
PATHS = {"new": {}, "old": dict(bf16_weights=False, pack=False, fused_logprobs=False)}


def matmul_peak(dtype: torch.dtype, seconds: float) -> tuple[float, float]:
    """Best FLOP/s of square matmuls (sizes 1024..4096) within about ``seconds``, by wall
    time and by this process's CPU time (FLOP per CPU-second, summed over threads)."""
    best = best_cpu = 0.0
    for n in (1024, 2048, 3072, 4096):
        a = torch.randn(n, n).to(dtype)
        b = torch.randn(n, n).to(dtype)
        a @ b  # warm-up: pick kernels, touch memory
        reps, t0 = 0, time.perf_counter()
        while True:
            t, c = time.perf_counter(), time.process_time()
            a @ b
            best = max(best, 2 * n ** 3 / (time.perf_counter() - t))
            best_cpu = max(best_cpu, 2 * n ** 3 / max(time.process_time() - c, 1e-9))
            reps += 1
            if time.perf_counter() - t0 > seconds / 4 and reps >= 2:
                break
    return best, best_cpu


def make_batch(learner: TorchLearner, n: int, prompt_len: int, response_len: int, vocab: int,
               seed: int) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    # lengths vary ±25 % like real rollouts, so length sorting has something to do
    prompts, responses = [], []
    for _ in range(n):
        p = int(prompt_len * (0.75 + 0.5 * torch.rand(1, generator=g)))
        r = int(response_len * (0.75 + 0.5 * torch.rand(1, generator=g)))
        prompts.append(torch.randint(3, vocab, (p,), generator=g).tolist())
        responses.append(torch.randint(3, vocab, (r,), generator=g).tolist())
    old = learner.logprobs(prompts, responses)
    adv = [torch.randn(len(r), generator=g) for r in responses]
    return TrainBatch(prompts, responses, adv, old)


def bench_update(model_path: str, bf16: bool, args) -> list[dict]:
    """One result per path in ``args.paths``. Each round builds each path's learner in
    turn (old, new, old, new, ...), warms it up with one update and times the next, so
    both paths see the same spells of machine load and only one learner is in memory."""
    batch, params = None, 0
    wall: dict[str, list[float]] = {n: [] for n in args.paths}
    cpu: dict[str, list[float]] = {n: [] for n in args.paths}
    for _ in range(args.steps):
        for name in args.paths:
            cfg = LearnerConfig(actor_learning_rate=1e-6, lr_warmup_ratio=0.0, total_steps=1000, micro_batch_size=args.micro_batch,
                                bf16=bf16, **PATHS[name])
            learner = TorchLearner(model_path, cfg, need_ref=False)
            if batch is None:
                batch = make_batch(learner, args.batch, args.prompt_len, args.response_len,
                                   learner.policy.config.vocab_size, args.seed)
                params = sum(p.numel() for p in learner.policy.parameters())  # tied head counted once
            learner.step(batch)  # warm-up: Adam state allocation, kernel selection
            t, c = time.perf_counter(), time.process_time()
            m = learner.step(batch)
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
            if m["actor/skipped"]:
                raise RuntimeError("the benchmark update was skipped (non-finite)")
            del learner
            gc.collect()
    tokens = sum(len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids))
    out = []
    for name in args.paths:
        med, med_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        out.append({"path": name, "params": params, "tokens": tokens, "step_s": med, "step_s_best": min(wall[name]),
                    "step_s_all": [round(x, 3) for x in wall[name]],
                    "spread": (max(wall[name]) - min(wall[name])) / med,
                    "cpu_s": med_cpu, "cpu_s_all": [round(x, 3) for x in cpu[name]],
                    "tokens_per_s": tokens / med, "flops_per_s": 6 * params * tokens / med})
    return out


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="model spec for serl.models.resolve.resolve_model")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma list of fp32 and/or bf16")
    ap.add_argument("--batch", type=int, default=8, help="sequences per update")
    ap.add_argument("--prompt-len", type=int, default=128, help="mean prompt length (tokens)")
    ap.add_argument("--response-len", type=int, default=256, help="mean response length (tokens)")
    ap.add_argument("--micro-batch", type=int, default=4, help="sequences per forward/backward")
    ap.add_argument("--steps", type=int, default=3,
                    help="rounds per dtype: each builds each path's learner, warms it up, times one update")
    ap.add_argument("--paths", default="new", help="comma list of new and/or old (interleaved; see above)")
    ap.add_argument("--peak-seconds", type=float, default=4.0, help="time spent measuring each matmul peak")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads for the peak and the updates (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic batch")
    ap.add_argument("--out", default=str(RESULTS), help="JSONL file to append to")
    ap.add_argument("--note", default="",
                    help="free text stored with the result")
    args = ap.parse_args(argv)
    args.paths = args.paths.split(",")
    bad = [d for d in args.dtypes.split(",") if d not in DTYPES] + [p for p in args.paths if p not in PATHS]
    if bad or min(args.batch, args.prompt_len, args.response_len, args.micro_batch, args.steps) < 1:
        ap.exit(2, f"bench/learner.py: bad --dtypes/--paths {bad} or a size below 1\n")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    from serl.models.resolve import resolve_model

    path = resolve_model(args.model)
    rows = []
    load_start = os.getloadavg()[0]
    for name in args.dtypes.split(","):
        # the peak is taken before and after the updates and the higher one kept: on a
        # shared machine one reading can land in a busy spell and flatter the MFU
        before = matmul_peak(DTYPES[name], args.peak_seconds)
        results = bench_update(path, name == "bf16", args)
        after = matmul_peak(DTYPES[name], args.peak_seconds)
        peak, peak_cpu = max(before[0], after[0]), max(before[1], after[1])
        for r in results:
            # by CPU time: time other jobs take from this process counts on neither side
            mfu_cpu = 6 * r["params"] * r["tokens"] / r["cpu_s"] / peak_cpu
            r.update(dtype=name, peak_flops_per_s=peak, peak_readings=[before[0], after[0]],
                     peak_cpu_flops_per_s=peak_cpu, mfu=r["flops_per_s"] / peak, mfu_cpu=mfu_cpu)
            rows.append(r)
    print(f"{'dtype':<6}{'path':<5}{'tokens':>7}{'step s':>8}{'spread':>8}{'tokens/s':>9}{'GFLOP/s':>9}"
          f"{'peak GFLOP/s':>13}{'MFU':>7}{'cpu s':>8}{'MFU(cpu)':>9}")
    for r in rows:
        print(f"{r['dtype']:<6}{r['path']:<5}{r['tokens']:>7}{r['step_s']:>8.2f}{100 * r['spread']:>7.0f}%"
              f"{r['tokens_per_s']:>9.1f}{r['flops_per_s'] / 1e9:>9.1f}{r['peak_flops_per_s'] / 1e9:>13.1f}"
              f"{100 * r['mfu']:>6.1f}%{r['cpu_s']:>8.2f}{100 * r['mfu_cpu']:>8.1f}%")
    print(f"load average (1 min): {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    record = {
        "bench": "learner", "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": cpu_model(), "threads": torch.get_num_threads(),
        "load_avg_1m": os.getloadavg()[0], "load_avg_1m_start": load_start, "paths": args.paths, "torch": torch.__version__, "model": args.model,
        "batch": args.batch, "prompt_len": args.prompt_len, "response_len": args.response_len,
        "micro_batch": args.micro_batch, "note": args.note,
        "results": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                    for r in rows],
    }
    with open(args.out, "a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
