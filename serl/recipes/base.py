"""The recipe interface: what a self-play recipe provides to the run.

The run loop (``serl.run.loop.Loop``) owns the step: it asks the recipe to ``collect``, runs the
update, syncs the weights, asks ``after_update``, times it all, and keeps the run state
(``serl.run.state``: step, RNGs, the generator's position), the checkpoints and the hooks
(evaluation, the time budget, the collapse guard, the report). A recipe owns its data, what it
collects each step and its own state; these eight are all it may override:

    class MyRecipe(Recipe):
        @classmethod
        def prepare(cls, cfg): ...                 # read and check inputs; nothing written yet
        @classmethod
        def eval_set(cls, cfg): ...                # what evaluate gets (default: math problems)
        def __init__(self, ctx, data): ...         # ctx: engines, tokenizer, run dir, logger, plan
        def collect(self, step) -> Collected: ...  # roll out, reward, build the batch
        def after_update(self, step, metrics, updated, local): ...  # optional; local: collect's
        def state_dict(self) -> dict: ...          # its own state besides RNGs and the policy
        def load_state_dict(self, state): ...
        def evaluate(self, eval_set, step): ...    # optional (default: greedy pass@1 on math)
        def close(self): ...

The rest of the class is helpers a recipe calls (``@final``: not to be overridden). The per-run
rules (the objective, the KL modes, a reference model, optimizer steps per step, the options a
resume may not change, the collapse guard's prompts) are one ``serl.config.plan.RecipeSpec``, the
``SPEC`` of the recipe's config class, which ``plan_run`` reads into the run's plan (``self.plan``).
"""

from __future__ import annotations

import random
import time
from types import SimpleNamespace
from typing import Any, final

from serl.run.context import RunContext
from serl.run.step import Collected, timed


class Recipe:
    """Base class of recipes; a subclass implements ``collect`` and whatever else of the eight it needs."""

    # ---- read before anything is written ---------------------------------------------------
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
            from serl.data.lengths import budget_for, check_eval_prompts
            from serl.models.chat import user_ids

            budget = budget_for(cfg)
            check_eval_prompts(
                problems,
                budget.tok,
                budget.max_tokens,
                lambda q: user_ids(budget.tok, q.strip(), cfg.system_prompt or ""),
                budget.option,
            )
        return problems

    @classmethod
    @final
    def eval_metric_names(cls, cfg, eval_set) -> set[str] | None:
        """The metrics ``evaluate`` will log for ``eval_set``, known before the model loads (so that
        --save_best is checked then); None when the recipe evaluates its own way."""
        if cls.evaluate is not Recipe.evaluate:
            return None
        names = {"time/eval"}
        for bench in {p.benchmark for p in eval_set}:
            names.add(f"eval/{bench}/pass@1")
            if cfg.eval_k:
                names.update(f"eval/{bench}/{m}@{cfg.eval_k}" for m in ("maj", "pass", "mean"))
        return names

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
        self.eval_records: list[dict] = []  # and its generations (text, answer, verdict), when it has them

    def collect(self, step: int) -> Collected:
        """This step's ``Collected``: the ``TrainBatch`` (None: nothing to train on), its metrics, and
        ``local``, what this step's ``after_update`` needs from this collect (under --async_train the
        next collect runs first, so it cannot live on the recipe)."""
        raise NotImplementedError

    def after_update(self, step: int, metrics: dict[str, float], updated: bool, local: Any = None) -> None:
        """After the update and weight sync (or the step without one): bookkeeping that
        belongs to the step; may add to ``metrics``. ``local``: ``Collected.local`` of this step."""

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
        out = evaluate_math(
            self.generator,
            self.tok,
            problems,
            k=cfg.eval_k,
            checker=self.checker,
            max_new_tokens=cfg.generate_max_len,
            fallback=cfg.answer_fallback,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            prompt_style="chat_boxed" if cfg.system_prompt else "chat",
            instruction=cfg.system_prompt,
        )
        metrics = {k: v for k, v in out["metrics"].items() if isinstance(v, (int, float))}
        metrics["time/eval"] = time.perf_counter() - t0
        self.eval_items, self.eval_records = out["items"], out.get("records", [])
        return metrics

    # ---- helpers recipes share (final: not part of the interface) -------------------------------
    @final
    def step(self, step: int) -> dict[str, float]:
        """One synchronous training step of the run loop outside a run (tests, notebooks)."""
        from serl.run.loop import Loop

        engines = SimpleNamespace(generator=self.generator, learner=self.learner)
        return Loop(self.cfg, None, engines, self, progress=self.progress).train(step)

    @final
    def timed(self, name: str):
        """Add the block's wall time to the step's ``time/NAME`` (``serl.run.step.timed``)."""
        return timed(name, getattr(self, "progress", "quiet"))

    @final
    def sampling(
        self,
        max_new_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
    ):
        """The run's sampling (``--generate_max_len``, ``--temperature``, ``--top_p``); a role or an
        evaluation may override any of them or set a seed. One place for every recipe."""
        from serl.engines.base import Sampling

        cfg = self.cfg
        return Sampling(
            max_new_tokens=cfg.generate_max_len if max_new_tokens is None else max_new_tokens,
            temperature=cfg.temperature if temperature is None else temperature,
            top_p=cfg.top_p if top_p is None else top_p,
            seed=seed,
        )

    @final
    def sample(
        self, prompts: list[list[int]], n: int, max_new_tokens: int | None = None, temperature: float | None = None
    ) -> list:
        """``n`` completions per prompt (token ids) with ``sampling(...)``; no prompts, no call."""
        if not prompts:
            return []
        return self.generator.generate(prompts, n, self.sampling(max_new_tokens, temperature))

    @final
    def chat_prompt(self, text: str, system_prompt: str | None = None, prefill: str = "") -> list[int]:
        """``text`` as a user turn in the model's chat template, with the run's instruction,
        and ``prefill`` as the reply's start: token ids in which the text stays text
        (``serl.models.chat``), so a problem or document cannot forge a turn."""
        from serl.models.chat import user_ids

        sp = self.cfg.system_prompt if system_prompt is None else system_prompt
        return user_ids(self.tok, text, sp or "", prefill)

    @final
    def group_batch(self, groups, rewards, estimator: str | None = None, metrics: dict | None = None):
        """Sampled groups (one per prompt) and one reward per completion -> a ``TrainBatch``
        with per-token advantages from ``estimator`` (default: the run's). Empty responses
        are dropped; truncation and length stats go into ``metrics`` when given."""
        import torch

        from serl.algos import compute_advantages
        from serl.engines.base import TrainBatch

        rows = [
            (g, c, float(r))
            for g, (group, rs) in enumerate(zip(groups, rewards))
            for c, r in zip(group, rs)
            if c.token_ids
        ]
        if not rows:
            return None
        lens = [len(c.token_ids) for _, c, _ in rows]
        mask = response_mask(lens)
        adv = compute_advantages(
            estimator or self.cfg.advantage_estimator,
            torch.tensor([r for _, _, r in rows]),
            torch.tensor([g for g, _, _ in rows]),
            mask,
            gamma=self.cfg.gamma,
        )
        if metrics is not None:
            metrics["response/length_mean"] = sum(lens) / len(lens)
            metrics["response/truncated_frac"] = sum(truncated(c) for _, c, _ in rows) / len(rows)
        return TrainBatch(
            prompt_ids=[list(c.prompt_ids) for _, c, _ in rows],
            response_ids=[list(c.token_ids) for _, c, _ in rows],
            advantages=[adv[i, :n] for i, n in enumerate(lens)],
        )


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
