"""Packed vs padded micro-batches on a GPU: the same log-probs (bf16 tolerance) and the
time of each (issue 35, section 3). Needs CUDA; written on a CPU-only machine and not yet
run on a GPU.

Each path is a TorchLearner in bf16 (bf16 weights, fp32 masters in AdamW) over the same
weights and the same batch of variable-length sequences:

    padded_sdpa   pack=False, attn_implementation=sdpa               the reference
    packed_sdpa   pack=True,  attn_implementation=sdpa               causal SDPA per sequence
    padded_fa2    pack=False, attn_implementation=flash_attention_2  transformers unpads     (flash-attn)
    packed_fa2    pack=True,  attn_implementation=flash_attention_2  one flash_attn_varlen_func per layer (flash-attn)

Per path: the largest |log-prob difference| from padded_sdpa over every response token,
the median time of a log-prob pass (no grad) and of one update (forward + backward over
every micro-batch, clipping, AdamW), tokens/s of the update, and peak GPU memory. The
paths run in rounds (one learner in memory at a time), so all see the same GPU state.

    python bench/varlen_gpu.py                         # random model of SmolLM2-135M's shape
    python bench/varlen_gpu.py --model smollm2 --seqs 64 --micro 16
    python bench/varlen_gpu.py --check                 # exit 1 if a path is off by more than --tol
    python bench/varlen_gpu.py --device cpu --tiny --seqs 4 --no-record   # smoke run of the script itself
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time

import torch

from _common import append_result  # noqa: E402  (also puts the repo on sys.path)

from serl.engines.attention import flash_attn_importable  # noqa: E402
from serl.engines.base import TrainBatch  # noqa: E402
from serl.engines.learner_core import LearnerConfig  # noqa: E402
from serl.engines.torch_learner import TorchLearner  # noqa: E402

PATHS = {"padded_sdpa": (False, "sdpa"), "packed_sdpa": (True, "sdpa"),
         "padded_fa2": (False, "flash_attention_2"), "packed_fa2": (True, "flash_attention_2")}
BF16_TOL = 0.05  # bf16 log-probs of two attention kernels differ by rounding (0.03 on the tiny CPU model)


def random_model(path: str, seed: int, tiny: bool) -> None:
    """A random Llama of SmolLM2-135M's shape (``tiny``: 2 small layers); init scale 0.1 so
    log-probs are not flat."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(seed)
    shape = (dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2) if tiny else
             dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30))
    cfg = LlamaConfig(**shape, num_attention_heads=9 if not tiny else 4, num_key_value_heads=3 if not tiny else 2,
                      head_dim=64 if not tiny else 16, tie_word_embeddings=True, initializer_range=0.1,
                      pad_token_id=0, bos_token_id=1, eos_token_id=2)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)


def make_batch(n: int, vocab: int, seed: int, tiny: bool) -> tuple[list, list, list]:
    """Prompts of 32..256 and responses of 16..768 tokens: as uneven as RL rollouts (``tiny``: 8x shorter)."""
    g = torch.Generator().manual_seed(seed)
    k = 8 if tiny else 1
    lens = lambda lo, hi: int(torch.randint(lo // k, hi // k + 1, (1,), generator=g))  # noqa: E731
    prompts = [torch.randint(3, vocab, (lens(32, 256),), generator=g).tolist() for _ in range(n)]
    responses = [torch.randint(3, vocab, (lens(16, 768),), generator=g).tolist() for _ in range(n)]
    return prompts, responses, [torch.randn(len(r), generator=g) for r in responses]


def timed(fn, reps: int, cuda: bool) -> list[float]:
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    out = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t)
    return out


def run_path(name: str, model: str, args, batch) -> dict:
    pack, attn = PATHS[name]
    cuda = args.device == "cuda"
    cfg = LearnerConfig(device=args.device, bf16=True, pack=pack, attn_implementation=attn, micro_batch_size=args.micro,
                        actor_learning_rate=1e-6, lr_warmup_ratio=0.0, total_steps=1000, objective="pg")
    learner = TorchLearner(model, cfg, need_ref=False)
    prompts, responses, adv = batch
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    lp = learner.logprobs(prompts, responses)  # also the warm-up
    lp_times = timed(lambda: learner.logprobs(prompts, responses), args.reps, cuda)
    learner.step(TrainBatch(prompts, responses, adv))  # warm-up (the weights move by lr=1e-6)
    up_times = timed(lambda: learner.step(TrainBatch(prompts, responses, adv)), args.reps, cuda)
    tokens = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    row = dict(path=name, attention=learner.attention, packed=learner.packed,
               logprob_s=statistics.median(lp_times), update_s=statistics.median(up_times),
               update_tokens_per_s=tokens / statistics.median(up_times),
               peak_gib=torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else 0.0, logprobs=torch.cat(lp))
    del learner
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="a model spec or folder (default: random, SmolLM2-135M's shape)")
    ap.add_argument("--seqs", type=int, default=32, help="sequences in the batch")
    ap.add_argument("--micro", type=int, default=8, help="micro_batch_size")
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per path (median reported)")
    ap.add_argument("--tol", type=float, default=BF16_TOL, help="largest |log-prob difference| allowed")
    ap.add_argument("--check", action="store_true", help="exit 1 when a path differs by more than --tol")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: a smoke run of the script")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer random model instead of SmolLM2's shape")
    ap.add_argument("--no-record", action="store_true", help="do not append to bench/results.jsonl")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("varlen_gpu: needs a CUDA GPU (torch sees none); --device cpu for a smoke run", file=sys.stderr)
        return 2
    flash, why = flash_attn_importable() if args.device == "cuda" else (False, "CPU smoke run")
    names = [n for n in PATHS if flash or "fa2" not in n]
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none (CPU smoke run)"
    print(f"GPU: {gpu}; {why}; paths: {', '.join(names)}")
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if not model:
            model = f"{tmp}/model"
            random_model(model, seed=0, tiny=args.tiny)
        else:
            from serl.models.resolve import resolve_model

            model = resolve_model(model)
        from transformers import AutoConfig

        batch = make_batch(args.seqs, AutoConfig.from_pretrained(model).vocab_size, seed=1, tiny=args.tiny)
        rows = [run_path(n, model, args, batch) for n in names]
    ref = rows[0]["logprobs"]
    bad = []
    print(f"{'path':<12} {'max |dlogp|':>11} {'logprobs s':>10} {'update s':>9} {'tok/s':>9} {'peak GiB':>8}  "
          "attention")
    for r in rows:
        r["max_abs_diff"] = float((r.pop("logprobs") - ref).abs().max())
        if r["max_abs_diff"] > args.tol:
            bad.append(r["path"])
        print(f"{r['path']:<12} {r['max_abs_diff']:>11.4f} {r['logprob_s']:>10.3f} {r['update_s']:>9.3f} "
              f"{r['update_tokens_per_s']:>9.0f} {r['peak_gib']:>8.2f}  {r['attention']}")
    print(f"log-prob std over tokens: {float(ref.std()):.3f} (the differences' scale)")
    if not args.no_record:
        append_result(dict(bench="varlen_gpu", gpu=gpu, torch=torch.__version__,
                           flash_attn=why, model=args.model or "random SmolLM2-135M shape", seqs=args.seqs,
                           micro=args.micro, reps=args.reps, rows=rows))
    if bad:
        print(f"log-probs differ by more than {args.tol}: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
