"""One rank of the DeepSpeed learner test (run by torchrun from test_deepspeed_learner.py).

Scores a fixed batch, trains one step, snapshots the gathered weights, saves, trains a
second step, reloads the checkpoint and trains that second step again; rank 0 writes
everything the test compares to ``OUT/result.pt`` (each rank its weights to
``OUT/weights_rankN.pt``). ``--quick`` stops after the HF export.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch


def batch(seed: int, n: int, vocab: int, nan: bool = False, shared: bool = False):
    """Random prompts/responses/advantages; also rebuilt by the test for the torch learner.
    ``shared``: sequences 0-2, 3-5, ... have one prompt (GRPO groups of 3)."""
    g = torch.Generator().manual_seed(seed)
    prompts = [
        torch.randint(1, vocab, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]
    if shared:
        prompts = [list(prompts[i - i % 3]) for i in range(n)]
    resps = [
        torch.randint(1, vocab, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist() for _ in range(n)
    ]
    adv = [torch.randn(len(r), generator=g) for r in resps]
    if nan:
        adv[0][0] = float("nan")
    return prompts, resps, adv


def digest(t: torch.Tensor) -> tuple:
    import hashlib

    return tuple(t.shape), str(t.dtype), hashlib.sha1(t.contiguous().view(-1).view(torch.uint8).numpy()).hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stage", type=int, required=True)
    ap.add_argument("--num_seqs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--kl", action="store_true", help="use the KL loss (needs the reference model)")
    ap.add_argument("--quick", action="store_true", help="one step and an HF export only")
    ap.add_argument(
        "--bf16",
        nargs="?",
        const="true",
        default="false",
        help="bf16 weights (fp32 Adam masters): true, false or auto (where the CPU has native bf16)",
    )
    ap.add_argument("--adam_offload", action="store_true", help="DeepSpeed's CPU Adam")
    ap.add_argument("--grad_ckpt", action="store_true", help="gradient checkpointing")
    ap.add_argument("--lora_rank", type=int, default=0, help="train a LoRA adapter of this rank")
    ap.add_argument("--share_prompts", action="store_true", help="groups of 3 share a prompt, written once")
    a = ap.parse_args()

    from serl.engines.base import TrainBatch
    from serl.engines.deepspeed_learner import DeepSpeedLearner, DeepSpeedOptions
    from serl.engines.precision import hardware, learner_bf16
    from serl.engines.torch_learner import LearnerConfig

    cfg = LearnerConfig(
        actor_learning_rate=a.lr,
        lr_warmup_ratio=0.0,
        total_steps=10,
        micro_batch_size=2,
        kl_loss_coef=0.1 if a.kl else 0.0,
        seed=0,
        bf16=learner_bf16(a.bf16, hardware("cpu")),
        gradient_checkpointing=a.grad_ckpt,
        lora_rank=a.lora_rank,
        share_prompts=a.share_prompts,
    )
    ln = DeepSpeedLearner(
        a.model, cfg, need_ref=a.kl, opts=DeepSpeedOptions(zero_stage=a.stage, adam_offload=a.adam_offload)
    )
    vocab = ln.lm.config.vocab_size
    res: dict = {"world": ln.world}

    def make(seed, nan=False):
        p, r, adv = batch(seed, a.num_seqs, vocab, nan, a.share_prompts)
        old = ln.logprobs(p, r)
        return old, TrainBatch(p, r, adv, [o + 0.01 for o in old])  # ratios != 1

    res["logprobs"], b1 = make(1)
    if a.kl:
        res["ref_logprobs"] = ln.logprobs(b1.prompt_ids, b1.response_ids, model="ref")
    res["m1"] = ln.step(b1)
    if a.quick:  # a digest per parameter: the real model's weights are too big to dump twice
        weights = {n: digest(t) for n, t in ln.named_weights()}
    else:
        weights = {n: t.clone() for n, t in ln.named_weights()}
    torch.save(weights, f"{a.out}/weights_rank{ln.rank}.pt")
    if a.quick:
        ln.export_hf(f"{a.out}/hf")
        return finish(ln, res, a.out)
    ln.save(f"{a.out}/ckpt")
    ln.save(f"{a.out}/final", state=False)  # as the run's final model/: no DeepSpeed state
    _, b2 = make(2)
    res["m2"] = ln.step(b2)
    ln.load(f"{a.out}/ckpt")
    res["m2_again"] = ln.step(b2)
    _, bad = make(3, nan=True)
    before = {n: t.clone() for n, t in ln.named_weights()}
    res["m_nan"] = ln.step(bad)
    after = {n: t.clone() for n, t in ln.named_weights()}
    res["nan_unchanged"] = all(torch.equal(before[k], after[k]) for k in before)
    res["m_after_nan"] = ln.step(b2)  # trains normally again
    # on-policy batch: no old log-probs, the learner takes its own (ratio exactly 1)
    res["m_onpolicy"] = ln.step(TrainBatch(b2.prompt_ids, b2.response_ids, b2.advantages))
    return finish(ln, res, a.out)


def finish(ln, res: dict, out: str) -> int:
    if ln.rank == 0:
        torch.save(res, f"{out}/result.pt")
    ln.close()
    return 0


if __name__ == "__main__":
    code = main()
    # Everything is written and the process group is gone. Skip the interpreter's teardown:
    # once in CI (stop 50) a rank aborted there ("terminate called without an active
    # exception", SIGABRT) after its last step, and failed a run whose results were complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
