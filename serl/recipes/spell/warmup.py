"""The verifier warm-up (``--verifier_warmup_steps N``): the run's first N steps train only the
verifier, on labelled training pairs (:mod:`serl.recipes.spell.verify_pairs`), with self-play's prompt."""

from __future__ import annotations

from serl.recipes.spell.judge import label_rewards, parse_judgment, verdict_metrics
from serl.recipes.spell.prompts import verifier_prompt
from serl.recipes.spell.role_batch import join_roles, role_batches
from serl.recipes.spell.verify_pairs import Balanced, read_pairs


def warmup_pairs(cfg, score, rng) -> Balanced | None:
    """The warm-up's pairs labelled by ``score`` (the rule), served balanced; None without a warm-up."""
    if not cfg.verifier_warmup_steps:
        return None
    pairs = read_pairs(cfg.verifier_warmup_data, score, cfg.eval_verify_data if cfg.heldout_eval else "")
    return Balanced(pairs, rng, f"verifier_warmup_data: {cfg.verifier_warmup_data}")


def warmup_step(recipe):
    """One warm-up step of ``recipe`` -> (batch, metrics). Not SPELL's: its verifier trains only where
    its majority agrees with the rule score, which an always-YES verifier never reaches. Here: balanced
    labelled pairs, one GRPO group of verdicts each, rewarded against the pair's rule label."""
    cfg, start = recipe.cfg, recipe.verdict_prefill
    pairs = recipe.warm.take(cfg.verifier_warmup_pairs)
    prompts = [
        recipe.chat_prompt(verifier_prompt(p.question, p.candidate, p.gold, cfg.compact_prompts), prefill=start)
        for p in pairs
    ]
    with recipe.timed("verifier"):
        groups = recipe.sample(prompts, cfg.verifier_warmup_samples, cfg.verifier_max_len)
    verdicts = [[parse_judgment(start + c.text) for c in g] for g in groups]  # judged on prefill + reply
    verifier = list(zip(groups, [label_rewards(v, p.label) for v, p in zip(verdicts, pairs)]))
    metrics = {f"warmup/{k}": v for k, v in verdict_metrics([p.label for p in pairs], verdicts).items()}
    metrics["warmup/pairs"] = float(len(pairs))
    # the verifier, the one role trained: its batch and train/verifier_seqs as in self-play
    return join_roles(role_batches({"verifier": verifier}, recipe.group_batch), metrics), metrics
