"""Weight sync: seconds to push SmolLM2-135M's weights from the learner into the vLLM engine.

The weights come from a live fp32 policy, as ``TorchLearner.named_weights`` yields them
(tied head listed once). ``VLLMGenerator.load_weights`` casts them to bf16 straight into
a safetensors file mapped in /dev/shm, asks the engine to reload from it and resets the
prefix cache. Alternating with it, the bench times the straightforward push serl used
before (bf16 copies, ``save_file``, reload). Each serl push is checked to take effect:
the greedy answer to a fixed prompt changes after pushing perturbed weights and comes
back after pushing the originals.

    python bench/weight_sync.py            # 5 timed pushes after one warm-up
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
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
    from serl.engines.causal_lm import load_causal_lm
    from serl.engines.factory import make_generator

    path = smollm2_path()
    policy = load_causal_lm(path, dtype=torch.float32)
    gen = make_generator("vllm", path, seed=0, max_model_len=512)  # as serl train builds it
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

    def save_file_push():
        """The straightforward push serl used before: bf16 copies, save_file, reload."""
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        tensors = {n: t.to(torch.bfloat16).contiguous() for n, t in weights()}
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].clone()
        t1 = time.perf_counter()
        save_file(tensors, os.path.join(legacy_dir, "model.safetensors"))
        t2 = time.perf_counter()
        gen.llm.collective_rpc("reload_weights", kwargs={"weights_path": legacy_dir})
        gen.llm.reset_prefix_cache()
        return {"cast": t1 - t0, "write": t2 - t1, "reload": time.perf_counter() - t2}

    legacy_dir = tempfile.mkdtemp(prefix="serl-bench-sync-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    save_file_push()  # warm-up
    totals, stages, legacy, legacy_stages = [], [], [], []
    for _ in range(args.runs):  # alternate the two ways
        t = time.perf_counter()
        gen.load_weights(weights())
        totals.append(time.perf_counter() - t)
        stages.append(dict(gen.sync_times))
        t = time.perf_counter()
        legacy_stages.append(save_file_push())
        legacy.append(time.perf_counter() - t)
    shutil.rmtree(legacy_dir, ignore_errors=True)

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
    s, old = spread(totals), spread(legacy)
    by_stage = {k: round(statistics.median(st[k] for st in stages), 4) for k in stages[0]}
    old_stage = {k: round(statistics.median(st[k] for st in legacy_stages), 4) for k in legacy_stages[0]}
    head = policy.config.vocab_size * policy.config.hidden_size
    print(f"SmolLM2-135M-Instruct, {n_params / 1e6:.1f}M parameters; pushed in bf16 with the tied "
          f"head as its own tensor: {2 * (n_params + head) / 1e6:.0f} MB")
    print(f"{'push':<30}{'median s':>10}{'min':>8}{'max':>8}   stages (median s)")
    for label, x, st in (("serl (in-place mapped file)", s, by_stage), ("save_file copy (before)", old, old_stage)):
        print(f"{label:<30}{x['median']:>10.3f}{x['min']:>8.3f}{x['max']:>8.3f}   "
              + ", ".join(f"{k} {v:.3f}" for k, v in st.items()))
    print(f"target <= 1 s: {'met' if s['median'] <= 1.0 else 'missed'}; push checked to take effect")

    import vllm

    append_result({"bench": "weight_sync", "vllm": vllm.__version__, "params": n_params,
                   "seconds": s, "stages_median_s": by_stage, "verified": True,
                   "save_file_seconds": old, "save_file_stages_median_s": old_stage,
                   "target_met": s["median"] <= 1.0}, **({"out": args.out} if args.out else {}))
    gen.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
