"""Where the learner's time goes on one model and setting: the two scoring passes (policy
and reference log-probs, no grad) and the update (forward + backward + optimizer step), each
timed and profiled by operator (``torch.profiler``, self CPU time).

The batch is synthetic, shaped like a SeRL step's: ``--seqs`` sequences of about
``--prompt-len`` + ``--response-len`` tokens (±25%). The rates are set against the FLOPs the
roofline counts (``roofline.py``'s ``forward_work`` and ``update_work``: the LM head only at
answer tokens; under LoRA no weight gradients for the frozen base).

    python bench/learner_profile.py --model qwen2.5-coder-0.5b --lora-rank 32 --micro-batch 8
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import _common  # noqa: F401  (puts the repo on sys.path)

from serl.engines.base import TrainBatch  # noqa: E402
from serl.engines.learner_core import LearnerConfig  # noqa: E402
from serl.engines.torch_learner import TorchLearner  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", help="model spec for serl.models.resolve.resolve_model")
    ap.add_argument("--lora-rank", type=int, default=0, help="0: full fine-tuning")
    ap.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward")
    ap.add_argument("--seqs", type=int, default=16, help="sequences in the batch")
    ap.add_argument("--prompt-len", type=int, default=60, help="mean prompt tokens")
    ap.add_argument("--response-len", type=int, default=120, help="mean response tokens")
    ap.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing on")
    ap.add_argument("--runs", type=int, default=3, help="timed runs of each part (after one warm-up)")
    ap.add_argument("--top", type=int, default=15, help="operators shown per part (0: no profile run)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="another LearnerConfig field (int, float, true/false or text); repeatable")
    ap.add_argument("--parts", default="logprobs_policy,logprobs_ref,update", help="which parts to time")
    ap.add_argument("--out", default=None, help="JSONL to append the timings to (default: none)")
    return ap.parse_args(argv)


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def batch_for(learner, a) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    vocab = learner.policy.config.vocab_size
    jitter = lambda n: int(n * (0.75 + 0.5 * torch.rand(1, generator=g)))  # noqa: E731
    prompts = [torch.randint(10, vocab, (jitter(a.prompt_len),), generator=g).tolist() for _ in range(a.seqs)]
    resps = [torch.randint(10, vocab, (jitter(a.response_len),), generator=g).tolist() for _ in range(a.seqs)]
    adv = [torch.randn(len(r), generator=g) * 0.1 for r in resps]
    return TrainBatch(prompts, resps, adv, learner.logprobs(prompts, resps))


def flops(learner, batch: TrainBatch, a) -> dict[str, float]:
    """FLOPs of one scoring pass and of the update, by roofline.py's formulas."""
    from roofline import Shape, forward_work, update_work

    shape = Shape.from_config(learner.policy.config.to_dict())
    tokens = sum(len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids))
    answer = sum(len(r) for r in batch.response_ids)
    seqs = len(batch.response_ids)
    fwd = forward_work(shape, tokens, answer, seqs, a.micro_batch, 1, 2)[0][0]
    upd = update_work(shape, tokens, answer, seqs, a.micro_batch, 1, 2, a.lora_rank, a.grad_ckpt)[0][0]
    return {"tokens": tokens, "answer_tokens": answer, "forward": fwd, "update": upd}


def timed(fn, runs: int) -> list[float]:
    fn()  # warm-up
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def profile(fn, top: int) -> str:
    from torch.profiler import ProfilerActivity, profile as prof

    with prof(activities=[ProfilerActivity.CPU]) as p:
        fn()
    return p.key_averages().table(sort_by="self_cpu_time_total", row_limit=top)


def main(argv=None) -> int:
    from serl.models.resolve import resolve_model

    a = parse_args(argv)
    extra = {}
    for item in a.set:
        k, _, v = item.partition("=")
        extra[k] = _value(v)
    cfg = LearnerConfig(actor_learning_rate=1e-6, lr_warmup_ratio=0.0, total_steps=1000, micro_batch_size=a.micro_batch, bf16=True,
                        gradient_checkpointing=a.grad_ckpt, lora_rank=a.lora_rank,
                        lora_alpha=2.0 * a.lora_rank if a.lora_rank else 16.0, **extra)
    learner = TorchLearner(resolve_model(a.model), cfg, need_ref=True)
    batch = batch_for(learner, a)
    f = flops(learner, batch, a)
    parts = {"logprobs_policy": lambda: learner.logprobs(batch.prompt_ids, batch.response_ids, model="policy"),
             "logprobs_ref": lambda: learner.logprobs(batch.prompt_ids, batch.response_ids, model="ref"),
             "update": lambda: learner.step(batch)}
    rec = {"bench": "learner_profile", "model": a.model, "lora_rank": a.lora_rank, "micro_batch": a.micro_batch,
           "grad_ckpt": a.grad_ckpt, "set": extra, **f, "parts": {}}
    print(f"{a.model}: {f['tokens']} tokens ({f['answer_tokens']} answer) in {a.seqs} sequences, "
          f"micro-batch {a.micro_batch}, LoRA {a.lora_rank}, grad ckpt {a.grad_ckpt}, {extra or ''}")
    for name, fn in parts.items():
        if name not in a.parts.split(","):
            continue
        ts = timed(fn, a.runs)
        med = statistics.median(ts)
        work = f["update"] if name == "update" else f["forward"]
        rec["parts"][name] = {"s": [round(t, 3) for t in ts], "median_s": round(med, 3),
                              "tokens_per_s": round(f["tokens"] / med, 1), "gflops": round(work / med / 1e9, 1)}
        print(f"\n== {name}: median {med:.2f} s of {[round(t, 2) for t in ts]}, {f['tokens'] / med:.0f} tokens/s, "
              f"{work / med / 1e9:.0f} GFLOP/s")
        if a.top > 0:  # --top 0: timings only
            print(profile(fn, a.top))
    import resource

    rec["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 2)
    print(f"peak RSS of this process: {rec['peak_rss_gib']} GiB")
    if a.out:
        with open(a.out, "a") as fh:
            fh.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
