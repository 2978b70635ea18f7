"""One learner step with ``LearnerConfig.share_prompts`` on and off (issue 33, section 3):
GRPO-shaped batches of a few long prompts with several short responses each, as SPELL's
responder makes (a ~1000-token document, 8 answers).

The batch is real text (this repository's README, tokenized): ``--prompts`` windows of
``--prompt_len`` tokens, each with ``--responses`` responses of about ``--resp_len``
tokens (lengths spread by +-25%), fixed advantages and old log-probs, so a step is one
forward and backward pass over every micro-batch plus the optimizer step. Both settings
run on the same learner, interleaved (off, on, off, on, ...), and the script prints the
time of each step, the medians, the micro-batches and row tokens of each layout, and the
largest log-prob difference between the two layouts before training.

    python bench/share_prompts.py                     # SmolLM2, bf16, LoRA rank 32, 2 x 800 + 8 x 64
    python bench/share_prompts.py --lora_rank 0 --reps 1
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch

from _common import ROOT, load_avg, machine, now  # noqa: E402  (also puts the repo on sys.path)

from serl.engines.base import TrainBatch  # noqa: E402
from serl.engines.learner_core import LearnerConfig  # noqa: E402
from serl.engines.torch_learner import TorchLearner  # noqa: E402
from serl.models.resolve import load_tokenizer, resolve_model  # noqa: E402


def make_batch(tok, args) -> tuple[list, list]:
    ids = tok.encode((ROOT / "README.md").read_text())
    rng = random.Random(args.seed)
    prompts, responses = [], []
    for k in range(args.prompts):
        prompt = ids[k * args.prompt_len:(k + 1) * args.prompt_len]
        for _ in range(args.responses):
            n = rng.randint(int(args.resp_len * 0.75), int(args.resp_len * 1.25))
            at = rng.randrange(args.prompts * args.prompt_len, len(ids) - n)
            prompts.append(list(prompt))
            responses.append(ids[at:at + n])
    return prompts, responses


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--prompt_len", type=int, default=800)
    ap.add_argument("--responses", type=int, default=8)
    ap.add_argument("--resp_len", type=int, default=64)
    ap.add_argument("--micro", type=int, default=4, help="micro_batch_size")
    ap.add_argument("--lora_rank", type=int, default=32)
    ap.add_argument("--fp32", action="store_true", help="fp32 instead of bf16")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    path = resolve_model(args.model)
    tok = load_tokenizer(path)
    prompts, responses = make_batch(tok, args)
    cfg = LearnerConfig(actor_learning_rate=1e-6, lr_warmup_ratio=0.0, total_steps=100, micro_batch_size=args.micro,
                        bf16=not args.fp32, lora_rank=args.lora_rank, lora_alpha=2.0 * max(args.lora_rank, 1))
    ln = TorchLearner(path, cfg, need_ref=False)
    layouts, lp = {}, {}
    for share in (False, True):
        ln.cfg.share_prompts = share
        mbs, _ = ln._micro(prompts, responses)
        layouts[share] = dict(micro_batches=len(mbs), row_tokens=sum(mb.input_ids.shape[1] for mb in mbs))
        lp[share] = torch.cat(ln.logprobs(prompts, responses))
    g = torch.Generator().manual_seed(args.seed)
    adv = [torch.randn(len(r), generator=g) for r in responses]
    old = [t.clone() for t in ln.logprobs(prompts, responses)]
    batch = TrainBatch(prompts, responses, adv, old)
    times: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(args.reps):
        for share in (False, True):
            ln.cfg.share_prompts = share
            t = time.perf_counter()
            ln.step(batch)
            times[share].append(round(time.perf_counter() - t, 2))
            print(f"rep {rep} share_prompts={share}: {times[share][-1]} s", flush=True)
    out = dict(bench="share_prompts", time=now(), machine=machine(), load_avg=load_avg(), model=args.model,
               bf16=not args.fp32, lora_rank=args.lora_rank, micro_batch_size=args.micro,
               batch=f"{args.prompts} prompts x {args.prompt_len} tokens, {args.responses} responses of "
                     f"~{args.resp_len} each ({sum(map(len, responses))} response tokens)",
               off=dict(step_s=times[False], median_s=statistics.median(times[False]), **layouts[False]),
               on=dict(step_s=times[True], median_s=statistics.median(times[True]), **layouts[True]),
               max_abs_logprob_diff=round(float((lp[True] - lp[False]).abs().max()), 4))
    out["speedup"] = round(out["off"]["median_s"] / out["on"]["median_s"], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
