"""Does ``--vllm-sync reload`` (bench/_trl_reload_sync.py) put the trainer's weights into TRL's
colocated vLLM engine? Run with the TRL environment's python; bench/trl_vllm.py runs it before
its timed runs, and stops if it fails.

TRL's own ``VLLMGeneration`` (colocate, the engine built eager by the shim) next to the HF
model it serves. The per-token log-probs of one prompt, vLLM's (``prompt_logprobs``, bf16)
against the HF model's (fp32), are compared: first as loaded (the bf16 floor), then after the
HF weights are changed (every tensor plus Gaussian noise of 0.2 x its own std, rounded to
bf16 so the engine's cast adds nothing; the embedding is the tied LM head too) and before the
push (the engine is stale: must differ clearly), then after the push (must be back near the
floor). Then twice more into an engine already reloaded: other noise of the same size on the
original weights (not on top of the first: twice-noised weights have a higher bf16 floor of
their own), and last the original weights themselves, whose floor is the one measured first,
so that push must land within a hair of it. Prints the numbers and one ``SYNC_CHECK`` JSON
line; exits 1 if a push did not land.

    ../venv-trl/bin/python bench/_trl_sync_check.py --model DIR
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
          "in May. How many clips did Natalia sell altogether in April and May?")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="HF model folder (bench/trl_vllm.py passes SmolLM2's)")
    ap.add_argument("--noise", type=float, default=0.2, help="noise std, as a fraction of each tensor's std")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))  # serl's helpers, as _trl_grpo.py does
    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}.items():
        os.environ.setdefault(k, v)

    import torch
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.generation.vllm_generation import VLLMGeneration
    from vllm import SamplingParams

    import _trl_reload_sync as shim

    shim.install_eager()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(a.model)
    gen = VLLMGeneration(model=model, accelerator=Accelerator(cpu=True), processing_class=tok,
                         mode="colocate", max_model_length=512, max_num_seqs=4)
    shim.patch_sync(gen)
    ids = tok(PROMPT).input_ids
    targets = torch.tensor(ids[1:])

    def engine_logprobs() -> torch.Tensor:
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0)
        out = gen.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
        return torch.tensor([out.prompt_logprobs[i][t].logprob for i, t in enumerate(ids) if i > 0])

    def model_logprobs() -> torch.Tensor:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        return logits.log_softmax(-1).gather(1, targets[:, None])[:, 0]

    def gap() -> float:
        return (engine_logprobs() - model_logprobs()).abs().mean().item()

    original = {n: p.detach().clone() for n, p in model.named_parameters()}

    def perturb(seed: int | None) -> None:
        """The original weights plus noise drawn from ``seed``; None: the original weights."""
        g = torch.Generator().manual_seed(seed or 0)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(original[n])
                if seed is not None:
                    p.add_(torch.randn(p.shape, generator=g) * a.noise * p.float().std().clamp_min(1e-6))
                    p.copy_(p.to(torch.bfloat16))  # values bf16 holds exactly, as the file the engine loaded

    res = {"floor": gap()}
    for k, seed in (("1", 1), ("2", 2), ("back", None)):
        perturb(seed)
        res[f"stale_{k}"] = gap()
        gen.sync_weights()
        res[f"pushed_{k}"] = gap()
    res["dropped_warnings"] = gen.reload_dropped_warnings
    # pushed: near the bf16 floor; stale: the weights changed enough that a missed push shows;
    # back: the original weights again, so the floor measured first holds to a hair
    limit = max(3 * res["floor"], res["floor"] + 0.05)
    ok = all(res[f"pushed_{k}"] <= limit and res[f"stale_{k}"] >= 3 * res[f"pushed_{k}"]
             for k in ("1", "2", "back")) and abs(res["pushed_back"] - res["floor"]) <= 0.01
    for name, v in res.items():
        print(f"{name:>18}: {v:.4f}" if isinstance(v, float) else f"{name:>18}: {v}")
    print(f"mean |log-prob gap| per token, nats; a push passes when <= {limit:.4f} and the stale gap is >= 3x it;"
          " the push back to the original weights within 0.01 of the floor")
    print("SYNC_CHECK " + json.dumps({**{k: round(v, 5) if isinstance(v, float) else v for k, v in res.items()},
                                      "limit": round(limit, 5), "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
