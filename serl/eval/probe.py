"""``serl probe``: before a label-free run, does the vote beat the model's own greedy answer?

Label-free training on a majority vote (TTRL, SeRL) can only teach what the vote knows: it
rewards the majority answer of K samples, so it helps where that answer is right more often
than the greedy one (maj@K > greedy) and pushes towards wrong answers where it is not. This
command measures that on seed problems, with serl's own generator factory, vote and math
checker, at the run's sampling settings:

- with labels (on all or some of the problems): the vote's accuracy (maj@K), greedy
  accuracy, the problems each gets right that the other does not (exact McNemar), and the
  vote's accuracy where the majority is clear (more than half the samples) and where not;
- where the greedy answer finished (not cut at the token limit): the same two accuracies and
  their gap, which is the part of the vote's lead about being right rather than about stopping;
- always: the share of cut answers (greedy and sampled), the majority's share (the training reward's ``reward/agreement``), the share of
  groups with a clear majority, ties, groups with no answer, and how often the greedy
  answer is the majority's.

Where the vote is right less often than greedy it says so plainly: label-free training
cannot help this model on this data. Docs: docs/guard.md ("Before a label-free run").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from math import comb
from pathlib import Path


@dataclass
class Item:
    """One problem's outcome."""

    greedy: str | None  # the greedy answer
    vote: str | None  # the majority answer of the K samples (None: none answered)
    share: float  # the majority cluster's share of the K samples
    tie: bool
    greedy_is_vote: bool  # the greedy answer is equivalent to the majority's
    greedy_ok: bool | None = None  # against the label (None: no label)
    vote_ok: bool | None = None
    greedy_cut: bool = False  # the greedy answer ran into --generate_max_len
    samples_cut: float = 0.0  # the share of the K samples that did
    texts: list[str] | None = None  # greedy text first, then the K samples (with --keep_texts)


def two_sided_p(b: int, c: int) -> float:
    """Exact McNemar (sign test), two-sided: problems only one of the two got right."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(max(b, c), n + 1)) / 2**n
    return min(1.0, 2 * tail)


def summarize(items: list[Item], k: int) -> dict:
    """The precondition's numbers (hand-checked in tests/eval/test_probe.py)."""
    n = len(items)
    clear = [it for it in items if it.vote is not None and it.share > 0.5]
    out: dict[str, float | None] = {
        "problems": n,
        "k": k,
        "mean_majority_share": sum(it.share for it in items) / max(1, n),
        "clear_majority_share": len(clear) / max(1, n),
        "tie_share": sum(it.tie for it in items) / max(1, n),
        "no_vote_share": sum(it.vote is None for it in items) / max(1, n),
        "greedy_is_vote_share": sum(it.greedy_is_vote for it in items) / max(1, n),
        "greedy_cut_share": sum(it.greedy_cut for it in items) / max(1, n),
        "sample_cut_share": sum(it.samples_cut for it in items) / max(1, n),
    }
    lab = [it for it in items if it.greedy_ok is not None]
    out["labelled"] = len(lab)
    if lab:
        g = sum(bool(it.greedy_ok) for it in lab)
        v = sum(bool(it.vote_ok) for it in lab)
        gained = sum(bool(it.vote_ok) and not it.greedy_ok for it in lab)
        lost = sum(bool(it.greedy_ok) and not it.vote_ok for it in lab)
        lab_clear = [it for it in lab if it.vote is not None and it.share > 0.5]
        lab_other = [it for it in lab if not (it.vote is not None and it.share > 0.5)]
        out |= {
            "greedy_acc": g / len(lab),
            f"maj@{k}_acc": v / len(lab),
            "vote_minus_greedy": (v - g) / len(lab),
            "vote_only_right": gained,
            "greedy_only_right": lost,
            "mcnemar_p": two_sided_p(gained, lost),
            "vote_acc_clear": (sum(bool(it.vote_ok) for it in lab_clear) / len(lab_clear)) if lab_clear else None,
            "vote_acc_unclear": (sum(bool(it.vote_ok) for it in lab_other) / len(lab_other)) if lab_other else None,
        }
        # the vote's lead where greedy finished: what the vote can teach about being right, apart from stopping
        done = [it for it in lab if not it.greedy_cut]
        out["greedy_finished"] = len(done)
        if done:
            out |= {
                "greedy_acc_finished": sum(bool(it.greedy_ok) for it in done) / len(done),
                f"maj@{k}_acc_finished": sum(bool(it.vote_ok) for it in done) / len(done),
                "vote_minus_greedy_finished": sum(int(bool(it.vote_ok)) - int(bool(it.greedy_ok)) for it in done)
                / len(done),
            }
    return out


def verdict(s: dict) -> str:
    """One plain sentence on the precondition."""
    k = s["k"]
    if not s["labelled"]:
        return (
            f"no labels: the vote's accuracy cannot be measured. The majority holds {s['mean_majority_share']:.0%} "
            f"of the samples on average, {s['clear_majority_share']:.0%} of the groups have a clear majority and "
            f"the greedy answer is the majority's in {s['greedy_is_vote_share']:.0%}; label a sample of the "
            f"seeds (--label_key) to check that the vote beats greedy before training on it"
        )
    g, v, d = s["greedy_acc"], s[f"maj@{k}_acc"], s["vote_minus_greedy"]
    counts = (
        f"maj@{k} {v:.1%} against greedy {g:.1%} on {s['labelled']} labelled problems "
        f"({s['vote_only_right']} right only by the vote, {s['greedy_only_right']} only by greedy, "
        f"McNemar p = {s['mcnemar_p']:.2g})"
    )
    noise = (
        "" if s["mcnemar_p"] < 0.05 else " (on this sample the gap is within the noise: label more seeds to confirm)"
    )
    if v < g:
        return (
            f"the vote is right less often than greedy: {counts}. Label-free training cannot help this model "
            f"on this data: it would reward answers that are worse than the model's own{noise}"
        )
    if v == g:
        return (
            f"the vote is right exactly as often as greedy: {counts}. The vote has nothing to teach here "
            f"beyond what greedy already answers"
        )
    return f"the vote beats greedy by {100 * d:+.1f} points: {counts}. The precondition holds{noise}{finished(s)}"


def finished(s: dict) -> str:
    """Where greedy answers were cut, the lead among the problems greedy finished (being right, not stopping)."""
    if not s.get("greedy_cut_share") or not s.get("greedy_finished"):
        return ""
    lead, done = s["vote_minus_greedy"], s["vote_minus_greedy_finished"]
    why = (
        "so the lead is about being right, not about stopping"
        if done >= lead
        else "so part of the lead is about stopping (a cut greedy answer against samples that finished)"
    )
    return (
        f". Greedy was cut at the token limit on {s['greedy_cut_share']:.0%} of the problems; where it finished "
        f"({s['greedy_finished']}) the vote leads by {100 * done:+.1f} points, {why}"
    )


# ---- the measurement --------------------------------------------------------------------------------
def measure(
    generator,
    tokenizer,
    problems: list[tuple[str, str | None]],
    *,
    k: int,
    checker,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    instruction: str,
    fallback: str,
    seed: int,
    keep_texts: bool = False,
) -> list[Item]:
    """Greedy and K sampled answers to each (question, label), the vote, and the comparisons."""
    from serl.engines.base import Sampling
    from serl.eval.math_bench import build_prompt_ids
    from serl.rewards import extract_answer, normalize_label, score_groups

    style = "chat_boxed" if instruction else "chat"
    prompts = [build_prompt_ids(q, tokenizer, style, instruction) for q, _ in problems]
    greedy_out = [g[0] for g in generator.generate(prompts, 1, Sampling(max_new_tokens, 0.0, 1.0))]
    greedy = [c.text for c in greedy_out]
    sampled = generator.generate(prompts, k, Sampling(max_new_tokens, temperature, top_p, seed=seed))
    votes = score_groups([[c.text for c in g] for g in sampled], None, checker, mode="majority", fallback=fallback)
    answers = [extract_answer(t, fallback) for t in greedy]
    labels = [normalize_label(lab) if lab else None for _, lab in problems]
    pairs, where = [], []
    for i, (a, vs, lab) in enumerate(zip(answers, votes, labels)):
        for what, x, y in (("gv", vs.label, a), ("gl", lab, a), ("vl", lab, vs.label)):
            if x is not None and y is not None:
                pairs.append((x, y))
                where.append((i, what))
    same = dict(zip(where, checker.equal_many(pairs) if pairs else []))
    return [
        Item(
            greedy=a,
            vote=vs.label,
            share=vs.agreement,
            tie=vs.tie,
            greedy_is_vote=bool(same.get((i, "gv"))),
            greedy_ok=None if lab is None else bool(same.get((i, "gl"))),
            vote_ok=None if lab is None else bool(same.get((i, "vl"))),
            greedy_cut=greedy_out[i].finish_reason == "length",
            samples_cut=sum(c.finish_reason == "length" for c in sampled[i]) / max(1, len(sampled[i])),
            texts=[greedy[i]] + [c.text for c in sampled[i]] if keep_texts else None,
        )
        for i, (a, vs, lab) in enumerate(zip(answers, votes, labels))
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="serl probe",
        description="Before a label-free run: does the majority vote "
        "of K samples beat the model's greedy answer on the seed problems?",
    )
    p.add_argument("--model", default="smollm2", help="model: a path, a hub id or an embedded name (smollm2)")
    p.add_argument("--prompt_data", required=True, help="seed problems (as serl train's --prompt_data)")
    p.add_argument("--input_key", default="problem", help="JSON key of the problem text")
    p.add_argument("--label_key", default="answer", help="JSON key of the label, where rows have one ('' = none)")
    p.add_argument("--n", type=int, default=64, help="problems drawn from the file with --seed (0 = all)")
    p.add_argument("--k", type=int, default=8, help="samples per problem for the vote")
    p.add_argument("--generate_max_len", type=int, default=256, help="max new tokens per answer (the run's)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (the run's)")
    p.add_argument("--top_p", type=float, default=1.0, help="nucleus sampling (the run's)")
    p.add_argument(
        "--system_prompt",
        default="Please reason step by step, and put your final answer within \\boxed{}.",
        help="the instruction after each problem (the run's; '' = none)",
    )
    p.add_argument(
        "--answer_fallback",
        default="number",
        choices=("number", "none"),
        help="when there is no \\boxed{}: the last number, or no answer",
    )
    p.add_argument("--generator", default="auto", choices=("auto", "vllm", "hf"), help="generation engine")
    p.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "bfloat16", "float16", "float32"),
        help="generator precision (auto: bf16 where the hardware computes it natively)",
    )
    p.add_argument("--max_model_len", type=int, default=2048, help="prompt + answer tokens")
    p.add_argument("--batch_size", type=int, default=32, help="HF generator: sequences per forward batch")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="HF generator device")
    p.add_argument("--seed", type=int, default=42, help="which problems, and the sampling seed")
    p.add_argument("--workers", type=int, default=1, help="math-verify worker processes")
    p.add_argument("--out", default="", help="also write the numbers and per-problem outcomes to this JSON file")
    p.add_argument("--keep_texts", action="store_true", help="also write every answer's text to --out")
    p.add_argument("--quiet", action="store_true", help="no start line on stderr")
    return p


def cli_main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.n < 0 or args.k < 1:
        print("serl probe: error: --n must be >= 0 and --k >= 1", file=sys.stderr)
        return 2
    from serl import DataError
    from serl.data.seeds import read_seeds
    from serl.eval.shared import make_generator
    from serl.models.resolve import load_tokenizer, resolve_model
    from serl.rewards import EquivalenceChecker

    try:
        rows = read_seeds(args.prompt_data, args.input_key, args.label_key or None)
    except DataError as e:
        print(f"serl probe: error: {e}", file=sys.stderr)
        return 2
    problems = [(r.text, r.label) for r in rows]
    if args.n and args.n < len(problems):
        keep = sorted(random.Random(args.seed).sample(range(len(problems)), args.n))
        problems = [problems[i] for i in keep]
    model_path = resolve_model(args.model)
    tokenizer = load_tokenizer(model_path)
    _, generator = make_generator(args.generator, model_path, tokenizer, args)
    try:
        with EquivalenceChecker(workers=max(1, args.workers)) as checker:
            items = measure(
                generator,
                tokenizer,
                problems,
                k=args.k,
                checker=checker,
                max_new_tokens=args.generate_max_len,
                temperature=args.temperature,
                top_p=args.top_p,
                instruction=args.system_prompt,
                fallback=args.answer_fallback,
                seed=args.seed,
                keep_texts=args.keep_texts,
            )
    finally:
        generator.close()
    s = summarize(items, args.k)
    s["verdict"] = verdict(s)
    for key, value in s.items():
        if key != "verdict":
            print(f"{key:26s} {value:.3f}" if isinstance(value, float) else f"{key:26s} {value}")
    print(f"\n{s['verdict']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps(
                {
                    "model": args.model,
                    "prompt_data": args.prompt_data,
                    "settings": vars(args),
                    "summary": s,
                    "items": [{k: v for k, v in vars(it).items() if k != "texts" or v is not None} for it in items],
                },
                indent=1,
            )
            + "\n"
        )
    return 0
