"""LoRA vs full fine-tuning on SmolLM2-135M-Instruct: the update's time and memory, and the
weight sync of merged weights into the generators.

Each measurement runs in a fresh process (``--worker MODE``) so that peak memory belongs
to one setting. The update: ``TorchLearner.step`` (fp32 weights, AdamW, PPO-clip loss) on
one fixed batch of random tokens, the same for every mode; one warm-up step, then
``--runs`` timed steps. Memory is the process's peak resident set (``ru_maxrss``) after
the steps minus the resident set after loading the model (the update's own memory:
gradients, Adam moments, activations; allocator caching included), plus the exact bytes
of gradients and Adam moments (3 fp32 numbers per trainable parameter).

The sync: ``named_weights`` (under LoRA: merged out of place) pushed into a transformers
generator (``HFGenerator.load_weights``) and, when vLLM is installed, into a vLLM engine
(``VLLMGenerator.load_weights``: bf16 into /dev/shm, engine reload), after one update so
that the adapter is not zero; one warm-up push, then ``--runs`` timed pushes.

    python bench/lora.py                 # full, rank 8, rank 64; sync for full and rank 8
    python bench/lora.py --no-vllm --runs 3
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from _common import append_result, smollm2_path, spread

MODES = {"full": 0, "lora8": 8, "lora64": 64}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed steps / pushes per mode (after one warm-up)")
    ap.add_argument("--seqs", type=int, default=8, help="sequences in the update's batch")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--response-len", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--no-vllm", action="store_true", help="skip the vLLM sync")
    ap.add_argument("--only", choices=("update", "sync"), default=None, help="run one of the two parts")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    return ap.parse_args(argv)


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _learner(rank: int, args):
    import torch

    from serl.engines.torch_learner import LearnerConfig, TorchLearner

    cfg = LearnerConfig(actor_learning_rate=1e-4, lr_warmup_ratio=0.0, total_steps=100, micro_batch_size=args.micro_batch, seed=0,
                        lora_rank=rank, lora_alpha=2.0 * rank if rank else 16.0)
    ln = TorchLearner(smollm2_path(), cfg, need_ref=False)
    g = torch.Generator().manual_seed(0)
    vocab = ln.policy.config.vocab_size
    prompts = [torch.randint(10, vocab, (args.prompt_len,), generator=g).tolist() for _ in range(args.seqs)]
    resps = [torch.randint(10, vocab, (args.response_len,), generator=g).tolist() for _ in range(args.seqs)]
    adv = [torch.randn(args.response_len, generator=g) for _ in range(args.seqs)]
    return ln, prompts, resps, adv


def worker_update(mode: str, args) -> dict:
    from serl.engines.base import TrainBatch

    rank = MODES[mode]
    ln, prompts, resps, adv = _learner(rank, args)
    trainable = sum(p.numel() for g in ln.optimizer.param_groups for p in g["params"])
    batch = TrainBatch(prompts, resps, adv, ln.logprobs(prompts, resps))
    rss_loaded = _rss_mib()
    times = []
    for i in range(args.runs + 1):
        t0 = time.perf_counter()
        ln.step(batch)
        if i:  # the first is warm-up
            times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"mode": mode, "rank": rank, "trainable_params": trainable, "step_s": spread(times),
            "rss_after_load_mib": round(rss_loaded, 1), "peak_rss_mib": round(peak, 1),
            "update_mem_mib": round(peak - rss_loaded, 1),
            "grads_and_adam_mib": round(3 * 4 * trainable / 2**20, 1)}


def worker_sync(mode: str, args) -> dict:
    from serl.engines.base import TrainBatch
    from serl.engines.hf_generator import HFGenerator

    rank = MODES[mode]
    ln, prompts, resps, adv = _learner(rank, args)
    ln.step(TrainBatch(prompts[:2], resps[:2], adv[:2], None))  # the adapter is no longer zero
    out = {"mode": mode, "rank": rank}

    def timed(fn) -> dict:
        fn()  # warm-up
        xs = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            fn()
            xs.append(time.perf_counter() - t0)
        return spread(xs)

    out["named_weights_s"] = timed(lambda: list(ln.named_weights()))
    gen = HFGenerator(smollm2_path(), tokenizer=ln.tokenizer or object(), seed=0, device="cpu")
    out["hf_sync_s"] = timed(lambda: gen.load_weights(ln.named_weights()))
    del gen
    from serl.engines.vllm_generator import vllm_available

    if not args.no_vllm and vllm_available():
        from serl.engines.vllm_generator import VLLMGenerator

        vgen = VLLMGenerator(smollm2_path(), seed=0, max_model_len=512)
        out["vllm_sync_s"] = timed(lambda: vgen.load_weights(ln.named_weights()))
        vgen.close()
    return out


def _run_worker(kind: str, mode: str, argv: list[str]) -> dict:
    cmd = [sys.executable, __file__, "--worker", f"{kind}:{mode}", *argv]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"worker {kind}:{mode} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.worker:
        kind, mode = args.worker.split(":")
        res = worker_update(mode, args) if kind == "update" else worker_sync(mode, args)
        print(json.dumps(res))
        return 0
    pass_on = [a for a in argv if a != "--worker"]
    updates = [_run_worker("update", m, pass_on) for m in MODES] if args.only != "sync" else []
    syncs = [_run_worker("sync", m, pass_on) for m in ("full", "lora8")] if args.only != "update" else []
    print(f"\nupdate: {args.seqs} sequences x ({args.prompt_len} prompt + {args.response_len} response) "
          f"tokens, micro-batch {args.micro_batch}, fp32, {args.runs} timed steps")
    print("| mode | trainable | s/step median (min-max) | update memory (peak RSS - loaded) | grads+Adam |")
    for u in updates:
        s = u["step_s"]
        print(f"| {u['mode']} | {u['trainable_params']:,} | {s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f}) "
              f"| {u['update_mem_mib']:.0f} MiB | {u['grads_and_adam_mib']:.0f} MiB |")
    print("\nsync (median s):")
    for s in syncs:
        v = s.get("vllm_sync_s", {}).get("median", float("nan"))
        print(f"| {s['mode']} | named_weights {s['named_weights_s']['median']:.3f} | "
              f"+ HF load_weights {s['hf_sync_s']['median']:.3f} | vLLM {v:.3f} |")
    settings = {k: v for k, v in vars(args).items() if k not in ("worker", "out")}
    record = {"bench": "lora", "settings": settings, "updates": updates, "syncs": syncs}
    if updates:
        record["median_step_ratio_lora8_vs_full"] = round(
            statistics.median(updates[1]["step_s"]["runs"]) / statistics.median(updates[0]["step_s"]["runs"]), 3)
    append_result(record, **({"out": args.out} if args.out else {}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
