"""Weight sync: seconds to push SmolLM2-135M's weights from the learner into the vLLM engine.

The weights come from a live fp32 policy, as ``TorchLearner.named_weights`` yields them
(tied head listed once); ``VLLMGenerator.load_weights`` casts to bf16, writes one
safetensors file to /dev/shm and asks the engine to reload it, then resets the prefix
cache. Each push is checked to take effect: the greedy answer to a fixed prompt changes
after pushing perturbed weights and comes back after pushing the originals.

    python bench/weight_sync.py            # 5 timed pushes after one warm-up
"""
from __future__ import annotations

import argparse
import time

import torch

from _common import append_result, smollm2_path, spread


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed pushes (after one warm-up)")
    ap.add_argument("--out", default=None, help="JSONL to append to (default bench/results.jsonl)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from serl.engines.base import Sampling
    from serl.engines.vllm_generator import VLLMGenerator
    from serl.models import load_causal_lm

    path = smollm2_path()
    policy = load_causal_lm(path, dtype=torch.float32)
    gen = VLLMGenerator(path, seed=0, max_model_len=512)
    prompt = gen.tokenizer.apply_chat_template([{"role": "user", "content": "What is 12 times 7?"}],
                                               add_generation_prompt=True, tokenize=False)
    greedy = Sampling(max_new_tokens=24, temperature=0.0)

    def answer() -> list[int]:
        return gen.generate([prompt], 1, greedy)[0][0].token_ids

    def weights():
        return ((n, p.detach()) for n, p in policy.named_parameters())

    before = answer()
    gen.load_weights(weights())  # warm-up (first write allocates the /dev/shm file)
    assert answer() == before, "pushing the unchanged weights changed the greedy answer"

    totals, stages = [], []
    for _ in range(args.runs):
        t = time.perf_counter()
        gen.load_weights(weights())
        totals.append(time.perf_counter() - t)
        stages.append(dict(gen.sync_times))

    # the push takes effect: perturbed weights change the answer, the originals restore it
    with torch.no_grad():
        saved = {n: p.clone() for n, p in policy.named_parameters()}
        for p in policy.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    gen.load_weights(weights())
    changed = answer() != before
    with torch.no_grad():
        for n, p in policy.named_parameters():
            p.copy_(saved[n])
    gen.load_weights(weights())
    restored = answer() == before
    assert changed and restored, f"sync did not take effect (changed={changed}, restored={restored})"

    n_params = sum(p.numel() for p in policy.parameters())
    s = spread(totals)
    by_stage = {k: round(sorted(st[k] for st in stages)[len(stages) // 2], 4) for k in stages[0]}
    head = policy.config.vocab_size * policy.config.hidden_size
    print(f"SmolLM2-135M-Instruct, {n_params / 1e6:.1f}M parameters; pushed in bf16 with the tied "
          f"head as its own tensor: {2 * (n_params + head) / 1e6:.0f} MB")
    print(f"{'push':<14}{'median s':>10}{'min':>8}{'max':>8}")
    print(f"{'total':<14}{s['median']:>10.3f}{s['min']:>8.3f}{s['max']:>8.3f}")
    for k, v in by_stage.items():
        print(f"{'  ' + k:<14}{v:>10.3f}")
    print(f"target <= 1 s: {'met' if s['median'] <= 1.0 else 'missed'}; push checked to take effect")

    import vllm

    append_result({"bench": "weight_sync", "vllm": vllm.__version__, "params": n_params,
                   "seconds": s, "stages_median_s": by_stage, "verified": True,
                   "target_met": s["median"] <= 1.0}, **({"out": args.out} if args.out else {}))
    gen.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
