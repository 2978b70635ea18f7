"""The recipe interface: what a self-play recipe provides to the runner.

The run loop (``serl.run.loop.Loop``) owns everything that is not the recipe: the step frame
(``serl.run.step``, ``serl.run.async_frame``: timing, fault points, the update and weight sync), the
run state (``serl.run.state``: step, RNGs, the generator's position), checkpoints, and the
hooks it calls (evaluation, the time budget, the collapse guard, the report). A recipe owns
its data, what it collects each step and its own state:

    class MyRecipe(Recipe):
        @classmethod
        def prepare(cls, cfg): ...                 # read and check inputs; nothing written yet
        def __init__(self, ctx, data): ...         # ctx: engines, tokenizer, run dir, logger
        def collect(self, step): ...               # -> (TrainBatch or None, metrics[, local])
        def after_update(self, step, metrics, updated, local): ...  # optional; local: collect's
        def state_dict(self) -> dict: ...          # its own state besides RNGs and the policy
        def load_state_dict(self, state): ...
        def close(self): ...

The cross-cutting rules a recipe decides are class methods here, read once into the run's
plan (``serl.config.plan.RunPlan``) that the engine factory, the Ray placement and the recipe
itself (``self.plan``) receive: whether a reference model is needed beyond the KL term's,
how many optimizer steps a training step makes (for the LR schedule), which objective the
learner runs. Which options a resume must refuse to change is ``run_defining``.
"""
from __future__ import annotations

import random
import time
from typing import Any

from serl.run.context import RunContext

# Options of every recipe that make a resume a different run if changed.
RUN_DEFINING_COMMON = ("recipe", "model", "prompt_data", "input_key", "label_key", "output_key", "prompt_split",
                       "max_samples", "seed",
                       "advantage_estimator", "reward_mode", "n_samples_per_prompt", "rollout_batch_size",
                       "init_kl_coef", "use_kl_loss", "gamma", "actor_learning_rate", "generator",
                       "learner", "train_batch_size", "lora_rank", "lora_alpha", "lora_dropout",
                       "target_modules")


class Recipe:
    """Base class of recipes; subclasses override ``step`` and whatever else they need."""

    # options (beyond RUN_DEFINING_COMMON) that a resume must refuse to change
    resume_fixed: tuple[str, ...] = ()

    # ---- rules read by the engine factory and the runner -------------------------------
    @classmethod
    def prepare(cls, cfg) -> Any:
        """Read and check the recipe's inputs before anything is written (raise DataError,
        ConfigError, ...). The result is passed to ``__init__``."""
        return None

    @classmethod
    def eval_set(cls, cfg) -> Any:
        """What ``evaluate`` is given, read before anything is written; empty: no evaluation.
        Default: the math problems of --eval_data and --eval_benchmarks."""
        from serl.eval.sets import load_eval_sets

        problems = load_eval_sets(cfg)
        if problems:  # asked as in training: the same budget refuses one that is too long
            from serl.models.chat import user_ids
            from serl.data.lengths import budget_for, check_eval_prompts

            budget = budget_for(cfg)
            check_eval_prompts(problems, budget.tok, budget.max_tokens,
                               lambda q: user_ids(budget.tok, q.strip(), cfg.system_prompt or ""),
                               budget.option)
        return problems

    @classmethod
    def eval_metric_names(cls, cfg, eval_set) -> set[str] | None:
        """The metrics ``evaluate`` will log for ``eval_set``, known before the model loads (so that
        --save_best is checked then); None when a recipe evaluates its own way."""
        if cls.evaluate is not Recipe.evaluate:
            return None
        names = {"time/eval"}
        for bench in {p.benchmark for p in eval_set}:
            names.add(f"eval/{bench}/pass@1")
            if cfg.eval_k:
                names.update(f"eval/{bench}/{m}@{cfg.eval_k}" for m in ("maj", "pass", "mean"))
        return names

    @classmethod
    def needs_reference(cls, cfg) -> bool:
        """Whether the run needs a reference model besides the one a KL term needs (the
        plan adds that one itself); SPIN: its DPO reference."""
        return False

    @classmethod
    def updates_per_step(cls, cfg) -> int:
        """Optimizer steps per training step (the LR schedule spans steps × this)."""
        return 1

    @classmethod
    def objective(cls, cfg) -> str:
        """The learner's objective (a name in serl.algos.objectives)."""
        return "ppo_clip"

    @classmethod
    def objective_args(cls, cfg) -> dict:
        """The objective's own settings (DPO: beta, loss_type, label_smoothing)."""
        return {}

    @classmethod
    def learner_settings(cls, cfg) -> dict:
        """Other ``LearnerConfig`` fields the recipe sets (e.g. ``ppo_epochs``, ``loss_agg``);
        with ``ppo_epochs`` > 1, ``updates_per_step`` should count the epochs too."""
        return {}

    @classmethod
    def guard_prompts(cls, data) -> list[tuple[str, str | None]] | None:
        """The training prompts (text, label or None) the collapse guard may probe
        (``serl.run.guard``); None: this recipe does not support the guard."""
        return None

    @classmethod
    def run_defining(cls) -> tuple[str, ...]:
        return RUN_DEFINING_COMMON + tuple(cls.resume_fixed)

    # ---- the recipe's life ---------------------------------------------------------------
    def __init__(self, ctx: RunContext, data: Any = None):
        self.ctx, self.cfg = ctx, ctx.cfg
        self.generator, self.learner, self.checker = ctx.generator, ctx.learner, ctx.checker
        self.tok, self.run_dir, self.logger, self.progress = ctx.tokenizer, ctx.run_dir, ctx.logger, ctx.progress
        if ctx.plan is None:
            from serl.config.plan import plan_run

            ctx.plan = plan_run(ctx.cfg)
        self.plan = ctx.plan  # the run's rules (serl.config.plan): the KL setting, the reference, ...
        self.rng = random.Random(self.cfg.seed)  # the recipe's draws; saved by serl.run.state
        # Per-problem results of the last ``evaluate`` (metric key -> {"ids", "values"}), when
        # it has them: the run summary pairs the first and last evaluations on them.
        self.eval_items: dict[str, dict] = {}

    def step(self, step: int) -> dict[str, float]:
        """One synchronous training step outside a run (tests, notebooks): ``serl.run.step.SyncFrame``."""
        from serl.run.step import SyncFrame

        return SyncFrame(self).step(step)

    def collect(self, step: int) -> tuple:
        """This step's ``TrainBatch`` (None: nothing to train on) and its metrics, and optionally
        a third value, ``local``: what this step's ``after_update`` needs from this collect (under
        --async_train the next collect runs first, so it cannot live on the recipe)."""
        raise NotImplementedError

    def after_update(self, step: int, metrics: dict[str, float], updated: bool, local: Any = None) -> None:
        """After the update and weight sync (or the step without one): bookkeeping that
        belongs to the step; may add to ``metrics``. ``local``: collect's third value (or None)."""

    def reference_step(self, step: int) -> int | None:
        """After a resume at ``step``: the step whose checkpointed policy the learner's reference
        must be (None or ``step``: the reference as the learner loaded it)."""
        return None

    def state_dict(self) -> dict:
        """The recipe's own state; step, RNGs and the generator are ``serl.run.state``'s."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def close(self) -> None:
        pass

    def evaluate(self, problems, step: int = 0) -> dict[str, float]:
        """Greedy pass@1 (and maj@K / pass@K with --eval_k) on held-out math problems, asked
        as in training (``--system_prompt`` after each question)."""
        from serl.eval import evaluate_math

        cfg = self.cfg
        t0 = time.perf_counter()
        # the prompt the policy is trained with: the run's instruction after each question
        out = evaluate_math(self.generator, self.tok, problems, k=cfg.eval_k, checker=self.checker,
                            max_new_tokens=cfg.generate_max_len, fallback=cfg.answer_fallback,
                            temperature=cfg.temperature, top_p=cfg.top_p,
                            prompt_style="chat_boxed" if cfg.system_prompt else "chat",
                            instruction=cfg.system_prompt)
        metrics = {k: v for k, v in out["metrics"].items() if isinstance(v, (int, float))}
        metrics["time/eval"] = time.perf_counter() - t0
        self.eval_items = out["items"]
        return metrics

    # ---- small helpers recipes share ---------------------------------------------------------
    def timed(self, name: str):
        """Add the block's wall time to the step's ``time/NAME`` (``serl.run.step.timed``)."""
        from serl.run.step import timed

        return timed(name, getattr(self, "progress", "quiet"))

    def sampling(self, max_new_tokens: int | None = None, temperature: float | None = None,
                 top_p: float | None = None, seed: int | None = None):
        """The run's sampling (``--generate_max_len``, ``--temperature``, ``--top_p``); a role or an
        evaluation may override any of them or set a seed. One place for every recipe."""
        from serl.engines.base import Sampling

        cfg = self.cfg
        return Sampling(max_new_tokens=cfg.generate_max_len if max_new_tokens is None else max_new_tokens,
                        temperature=cfg.temperature if temperature is None else temperature,
                        top_p=cfg.top_p if top_p is None else top_p, seed=seed)

    def sample(self, prompts: list[list[int]], n: int, max_new_tokens: int | None = None,
               temperature: float | None = None) -> list:
        """``n`` completions per prompt (token ids) with ``sampling(...)``; no prompts, no call."""
        if not prompts:
            return []
        return self.generator.generate(prompts, n, self.sampling(max_new_tokens, temperature))

    def chat_prompt(self, text: str, system_prompt: str | None = None, prefill: str = "") -> list[int]:
        """``text`` as a user turn in the model's chat template, with the run's instruction,
        and ``prefill`` as the reply's start: token ids in which the text stays text
        (``serl.models.chat``), so a problem or document cannot forge a turn."""
        from serl.models.chat import user_ids

        sp = self.cfg.system_prompt if system_prompt is None else system_prompt
        return user_ids(self.tok, text, sp or "", prefill)

    def group_batch(self, groups, rewards, estimator: str | None = None, metrics: dict | None = None):
        """Sampled groups (one per prompt) and one reward per completion -> a ``TrainBatch``
        with per-token advantages from ``estimator`` (default: the run's). Empty responses
        are dropped; truncation and length stats go into ``metrics`` when given."""
        import torch

        from serl.algos import compute_advantages
        from serl.engines.base import TrainBatch

        rows = [(g, c, float(r)) for g, (group, rs) in enumerate(zip(groups, rewards))
                for c, r in zip(group, rs) if c.token_ids]
        if not rows:
            return None
        lens = [len(c.token_ids) for _, c, _ in rows]
        mask = response_mask(lens)
        adv = compute_advantages(estimator or self.cfg.advantage_estimator,
                                 torch.tensor([r for _, _, r in rows]), torch.tensor([g for g, _, _ in rows]),
                                 mask, gamma=self.cfg.gamma)
        if metrics is not None:
            metrics["response/length_mean"] = sum(lens) / len(lens)
            metrics["response/truncated_frac"] = sum(truncated(c) for _, c, _ in rows) / len(rows)
        return TrainBatch(prompt_ids=[list(c.prompt_ids) for _, c, _ in rows],
                          response_ids=[list(c.token_ids) for _, c, _ in rows],
                          advantages=[adv[i, :n] for i, n in enumerate(lens)])

    def sync_weights(self) -> None:
        """Serve the learner's current weights from the generator."""
        with self.timed("sync"):
            self.generator.load_weights(self.learner.named_weights())


def response_mask(lens: list[int]):
    """The [rows, longest] mask of right-padded responses of these lengths."""
    import torch

    mask = torch.zeros(len(lens), max(lens))
    for i, n in enumerate(lens):
        mask[i, :n] = 1
    return mask


# ---- the overlong rule: one place for every recipe ---------------------------------------------
def truncated(completion) -> bool:
    """A response cut off by the token limit (it never finished)."""
    return completion.finish_reason == "length"


def masked_overlong(completion, enabled: bool) -> bool:
    """Whether the overlong filter leaves this response out of the loss: with ``enabled``,
    a truncated one is (DAPO, Yu et al. 2025, "overlong filtering"; SPIRAL, Liu et al. 2025).
    Its reward still counts where it was given (the vote, the group's baseline)."""
    return enabled and truncated(completion)
