"""The collapse guard: a label-free watch on a self-rewarded run, and what it does when the
run collapses (docs/guard.md).

Majority-vote training can sharpen a policy onto its own wrong answers: the vote agrees
with itself more and more while the answers get worse. The guard measures the one thing
the run cannot move by agreeing with itself: how often the current policy's greedy answer
matches the *untrained* model's vote on a fixed probe of training prompts (the anchor,
sampled once at the start). A policy that gets better keeps most anchor answers (where
the vote was right it was mostly right, by the vote's precondition maj@K > greedy); one
that collapses leaves them.

The rule (``serl.run.guard_rule``): a check is bad when its agreement is ``margin`` below the
best so far and a one-sided exact McNemar test of the drop gives p below the check's share of
the run's false-alarm budget; ``patience`` bad checks in a row fire the guard.
Actions: watch (log only), stop (end; the final model is the kept best policy), rollback
(reload the best policy, scale the learning rate, go on; after ``max_rollbacks`` stop).
The runner calls ``CollapseGuard`` between steps (``serl.run.runner``); probe work is not
counted in ``--max_minutes`` and is logged as ``guard/probe_s``. The probe and the anchor file are
``serl.run.guard_anchor``; the options are ``serl.run.guard_options``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from serl import ConfigError
from serl.run.guard_anchor import ANCHOR_FILE, anchor_header, read_anchor, select_probe, write_anchor
from serl.run.guard_rule import (  # noqa: F401
    EPS,
    GuardState,
    Rule,
    act,
    cut_lr,
    drop_p,
    flip_rate,
    judge,
    lost_gained,
    planned_checks,
    slope,
)

log = logging.getLogger("serl")

BEST_DIR = "guard_best"
BEST_META = "guard_best.json"
ACTIONS = {"none": 0, "watch": 1, "stop": 2, "rollback": 3}  # guard/action's codes
ITEMS_FILE = "guard_items.jsonl"  # one line per check: per-item outcomes and greedy answers
SCRIPT_ENV = "SERL_GUARD_SCRIPT"  # test hook: comma-separated agreements replace the measured ones


# ---- the probe and its anchor ------------------------------------------------------------------
def load_probe(cfg, spec, data, model_path: str, run_dir: Path | None = None):
    """Checks before anything is written: the recipe supports the guard, the probe has what
    the mode scores against, a given anchor file fits. Returns (probe, anchor or None)."""
    if getattr(cfg, "collapse_guard", "off") == "off":
        return None
    prompts = None if spec.guard_prompts is None else spec.guard_prompts(data)  # spec: the recipe's RecipeSpec
    if prompts is None:
        raise ConfigError(
            f"collapse_guard: recipe '{cfg.recipe}' does not support the collapse guard "
            f"(only serl does); use --collapse_guard off"
        )
    if cfg.guard_probe_data:  # prompts the run does not train on, read and length-checked as the seeds are
        from serl.data.lengths import fit_problems
        from serl.data.seeds import read_seeds

        rows = read_seeds(cfg.guard_probe_data, cfg.input_key, cfg.label_key or None, split=cfg.prompt_split)
        prompts = [(r.text, r.label) for r in fit_problems(cfg, rows)]
    probe = select_probe(prompts, cfg.guard_probe, cfg.seed)
    if cfg.guard_labels and not any(lab for _, _, lab in probe):
        raise ConfigError(
            f"guard_labels: none of the {len(probe)} probe prompts from "
            f"{cfg.guard_probe_data or cfg.prompt_data} has a "
            f"'{cfg.label_key}' label"
        )
    own = Path(run_dir or ".") / ANCHOR_FILE  # a resume reads the run's own copy
    given = own if run_dir and own.is_file() else Path(cfg.guard_anchor) if cfg.guard_anchor else None
    anchor = read_anchor(given, cfg, model_path, probe) if given and not cfg.guard_labels else None
    return probe, anchor


@contextmanager
def untouched_rng(generator):
    """Probe generate calls leave the run's sampling where it was (the generator's call
    counter and torch's RNG), so a watching guard does not change what the run samples."""
    import torch

    from serl.run.state import generator_state, load_generator_state

    gen, rng = generator_state(generator), torch.get_rng_state()  # Generator.state_dict (Ray too)
    try:
        yield
    finally:
        torch.set_rng_state(rng)
        load_generator_state(generator, gen)


# ---- the runner's hook ---------------------------------------------------------------------------
class CollapseGuard:
    """Made by the runner when --collapse_guard is not off; see the module doc."""

    def __init__(self, cfg, recipe, engines, run_dir: Path, model_path: str, logger, prepared):
        self.cfg, self.recipe, self.run_dir, self.logger = cfg, recipe, Path(run_dir), logger
        self.generator, self.learner, self.checker = engines.generator, engines.learner, engines.checker
        self.model_path = model_path
        self.probe, self.anchor = prepared
        self.mode = cfg.collapse_guard
        checks = getattr(cfg, "guard_checks", 0) or planned_checks(getattr(cfg, "steps", 1), cfg.guard_every)
        self.rule = Rule(
            cfg.guard_margin, cfg.guard_patience, cfg.guard_alpha, getattr(cfg, "guard_rule", "spent"), checks
        )
        self.st = GuardState(rule=self.rule_record())
        self.recent: list[tuple[float | None, float | None]] = []  # (vote agreement, entropy) per step
        self.since_check = 0  # steps since the last check (what the per-check means average over)
        self.last_metrics: dict = {}
        script = os.environ.get(SCRIPT_ENV, "")
        self.script = [float(x) for x in script.split(",") if x.strip()]

    # ---- state across --resume ------------------------------------------------------------
    def state_dict(self) -> dict:
        return asdict(self.st)

    def rule_record(self) -> dict:
        """What a resume must keep: the rule, its budget, the checks it is spread over, the
        rollback's floor."""
        return {
            "rule": self.rule.rule,
            "alpha": self.rule.alpha,
            "checks": self.rule.checks,
            "lr_floor": getattr(self.cfg, "guard_lr_floor", 0.0),
        }

    def load_state_dict(self, state: dict | None) -> None:
        if not state:
            return
        saved = dict(state.get("rule") or {"rule": "per_check"})  # saved by serl before issue 61
        now = self.rule_record()
        given = getattr(self.cfg, "guard_checks", 0)
        if "checks" in saved and not given:  # the plan made at the start holds, even if --steps grew since
            now["checks"] = self.rule.checks = saved["checks"]
        if saved.get("rule") != now["rule"] or ("alpha" in saved and saved != now):
            raise ConfigError(
                f"collapse guard: this run decides by {saved} (its checkpoint's guard state), "
                f"the resume would decide by {now}; resume with the run's --guard_rule, "
                f"--guard_alpha, --guard_checks and --guard_lr_floor"
            )
        planned = planned_checks(getattr(self.cfg, "steps", 1), self.cfg.guard_every)
        if self.rule.rule == "spent" and planned > self.rule.checks:
            log.warning(
                "collapse guard: --steps now plans %d checks, the run's false-alarm budget was spread over "
                "%d when it started; the checks beyond those spend past it (plan with --guard_checks at "
                "the start of a run that will be extended)",
                planned,
                self.rule.checks,
            )
        self.st = GuardState(**{**state, "rule": now})
        self.learner.lr_scale = self.st.lr_scale
        meta = self.run_dir / BEST_DIR / BEST_META
        kept = json.loads(meta.read_text())["step"] if meta.is_file() else None
        if kept != self.st.best_step:  # a best saved after the checkpoint this resume starts from
            log.warning(
                "collapse guard: %s holds step %s's policy, the checkpoint's best is step %d; it is "
                "replaced at the next new best",
                BEST_DIR,
                kept,
                self.st.best_step,
            )

    # ---- secondary signals (logged, never decide) -------------------------------------------
    def signals(self, m: dict) -> dict:
        """Each step's candidate signals; the step's vote agreement and entropy are also kept
        for the next check's means and trend (``window_signals``)."""
        out = self.step_signals(m)
        self.recent = (self.recent + [(m.get("reward/agreement"), m.get("actor/entropy"))])[-2 * self.cfg.guard_every :]
        self.since_check += 1
        return out

    def window_signals(self) -> dict:
        """At a check: the vote agreement's and the entropy's means over the steps since the last
        check, and the vote agreement's least-squares slope per step over the last 2 x guard_every steps."""
        out = {}
        for j, name in ((0, "vote_agreement"), (1, "entropy")):
            last = [x for r in self.recent[max(0, len(self.recent) - self.since_check) :] if (x := r[j]) is not None]
            if self.since_check and last:
                out[f"guard/{name}_mean"] = sum(last) / len(last)
        trend = slope([r[0] for r in self.recent if r[0] is not None])
        if trend is not None:
            out["guard/vote_agreement_trend"] = trend
        self.since_check = 0
        return out

    @staticmethod
    def step_signals(m: dict) -> dict:
        out = {}
        for key, name in (
            ("reward/agreement", "vote_agreement"),
            ("actor/entropy", "entropy"),
            ("reward/clusters", "clusters"),
        ):
            if key in m:
                out[f"guard/{name}"] = m[key]
        if m.get("batch/rolled_out"):
            out["guard/too_easy_share"] = m.get("filter/difficulty/too_easy", 0) / m["batch/rolled_out"]
        return out

    # ---- checks ---------------------------------------------------------------------------
    def start(self, done: int) -> None:
        """The anchor (this run's file on a resume, a given one, or sampled now) and, at the
        start of a run, the untrained policy's check (step 0)."""
        t0 = time.perf_counter()
        own = self.run_dir / ANCHOR_FILE
        if not self.cfg.guard_labels:
            if own.is_file():
                self.anchor = read_anchor(own, self.cfg, self.model_path, self.probe)
            elif self.anchor is not None:  # --guard_anchor: keep a copy, so the run directory says what it used
                shutil.copyfile(self.cfg.guard_anchor, own)
            else:
                self.anchor = self.sample_anchor(own)
        spent = time.perf_counter() - t0
        if done == 0:
            self.check(0, final=False, extra_s=spent)

    def sample_anchor(self, path: Path) -> dict[int, str | None]:
        from serl.engines.base import Sampling
        from serl.eval.math_bench import build_prompt_ids
        from serl.rewards import score_groups

        cfg = self.cfg
        style = "chat_boxed" if cfg.system_prompt else "chat"
        prompts = [build_prompt_ids(text, self.recipe.tok, style, cfg.system_prompt) for _, text, _ in self.probe]
        with untouched_rng(self.generator):
            groups = self.generator.generate(
                prompts,
                cfg.guard_k,
                Sampling(cfg.generate_max_len, cfg.temperature, cfg.top_p, seed=cfg.seed * 7919 + 17),
            )
        scores = score_groups(
            [[c.text for c in g] for g in groups], None, self.checker, mode="majority", fallback=cfg.answer_fallback
        )
        answers = {i: s.label for (i, _, _), s in zip(self.probe, scores)}
        shares = {i: s.agreement for (i, _, _), s in zip(self.probe, scores)}
        write_anchor(path, anchor_header(cfg, self.model_path), self.probe, answers, shares)
        n = sum(a is not None for a in answers.values())
        log.info("collapse guard: anchor of %d probe prompts (%d with a vote) written to %s", len(self.probe), n, path)
        if n == 0:
            raise ConfigError(
                f"collapse_guard: the untrained model's vote gave no answer on any of the "
                f"{len(self.probe)} probe prompts (see {path}); the guard has nothing to compare"
            )
        return answers

    def score(self) -> tuple[float, list[int], dict]:
        """The policy's greedy answers on the probe: agreement with the anchor (or accuracy on
        the labels), per-item outcomes, and other probe metrics."""
        from serl.eval import MathProblem, evaluate_math
        from serl.rewards import normalize_label

        cfg = self.cfg
        if cfg.guard_labels:
            golds = {i: normalize_label(lab) for i, _, lab in self.probe if lab}
        else:
            golds = {i: a for i, a in self.anchor.items() if a is not None}
        problems = [MathProblem("guard", i, text, str(golds[i])) for i, text, _ in self.probe if golds.get(i)]
        with untouched_rng(self.generator):
            out = evaluate_math(
                self.generator,
                self.recipe.tok,
                problems,
                k=0,
                checker=self.checker,
                max_new_tokens=cfg.generate_max_len,
                fallback=cfg.answer_fallback,
                prompt_style="chat_boxed" if cfg.system_prompt else "chat",
                instruction=cfg.system_prompt,
                prefix="guard",
                log=None,
            )
        recs = out["records"]
        items = [int(r["correct"]) for r in recs]
        extra = {
            "guard/probe_n": len(items),
            "guard/probe_cut": sum(r["finish_reason"] == "length" for r in recs) / max(1, len(recs)),
            "_answers": [r["answer"] for r in recs],
            "_idx": [r["idx"] for r in recs],
        }
        return sum(items) / max(1, len(items)), items, extra

    def check(self, step: int, final: bool, extra_s: float = 0.0) -> str:
        """One check (every --guard_every steps and at the end); logs guard/*, acts, and
        returns "stop" when the run must end here."""
        self.last_metrics = {}  # what this step's check logged (none: no check this step)
        if step and not final and step % self.cfg.guard_every:
            return ""
        t0 = time.perf_counter()
        score, items, m = self.score()
        if self.st.checks < len(self.script):  # test hook: a scripted agreement, as nested items
            hits = round(self.script[self.st.checks] * len(items))
            items = [1] * hits + [0] * (len(items) - hits)
            score = hits / max(1, len(items))
        answers, idx = m.pop("_answers", None), m.pop("_idx", None)
        m.update(self.window_signals())
        if answers is not None:
            flips = flip_rate(self.st.last_answers, answers)
            if flips is not None:
                m["guard/flip_rate"] = flips
            self.st.last_answers = list(answers)
        frozen = self.mode == "watch" and self.st.fired
        p = drop_p(self.st.best_items, items) if self.st.best is not None else 1.0
        if self.st.best is not None:
            m["guard/lost"], m["guard/gained"] = lost_gained(self.st.best_items, items)
        verdict = judge(self.st, self.rule, step, score, items, frozen=frozen)
        action = "none"
        if verdict == "best":
            self.save_best(step, score)
        elif verdict == "fire" and not frozen:
            action = act(self.st, self.mode, step, self.cfg.guard_max_rollbacks)
            self.do(action, step, score)
        key = "guard/label_acc" if self.cfg.guard_labels else "guard/agreement"
        m.update(
            {
                key: score,
                "guard/best": self.st.best,
                "guard/best_step": self.st.best_step,
                "guard/fired": int(self.st.fired),
                "guard/action": ACTIONS[action],
                "guard/rollbacks": self.st.rollbacks,
                "guard/bad_checks": self.st.below,
                "guard/drop_p": p,
                "guard/lr_scale": self.st.lr_scale,
                "guard/labelled": int(self.cfg.guard_labels),
                "guard/level": self.rule.level(),
                "guard/probe_s": time.perf_counter() - t0 + extra_s,
            }
        )
        self.keep_items(step, items, answers, idx)
        self.logger.log(step, m)
        self.last_metrics = m
        return "stop" if action == "stop" else ""

    def keep_items(self, step: int, items: list[int], answers, idx) -> None:
        """One line per check in RUN_DIR/guard_items.jsonl (after a resume a step may appear
        twice: the last line counts), so flip rates and the rule can be studied after the run."""
        row = {"step": step, "items": items, "answers": answers, "idx": idx}
        with open(self.run_dir / ITEMS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")

    # ---- the kept policy and the actions --------------------------------------------------
    def save_best(self, step: int, score: float) -> None:
        """The policy's weights (no optimizer state) to RUN_DIR/guard_best, whole or not at all."""
        from serl.run.checkpoint import disk_space_guard, fsync_dir

        final, new, old = (
            self.run_dir / BEST_DIR,
            self.run_dir / f".{BEST_DIR}.new",
            self.run_dir / f".{BEST_DIR}.old",
        )
        shutil.rmtree(new, ignore_errors=True)
        with disk_space_guard(new, self.run_dir, "the guard's best policy", partial=(new,)):
            self.learner.save(str(new), state=False)
            (new / BEST_META).write_text(json.dumps({"step": step, "agreement": score}) + "\n")
            fsync_dir(new)
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            os.replace(final, old)
        os.replace(new, final)
        shutil.rmtree(old, ignore_errors=True)
        log.info("collapse guard: new best agreement %.3f at step %d, policy kept in %s", score, step, final)

    def restore_best(self) -> None:
        """The kept policy into the learner (optimizer moments reset) and the generator."""
        self.learner.load_policy(str(self.run_dir / BEST_DIR))
        self.generator.load_weights(self.learner.named_weights())

    def do(self, action: str, step: int, score: float) -> None:
        what = (
            f"collapse guard fired at step {step}: agreement {score:.3f}, best {self.st.best:.3f} at step "
            f"{self.st.best_step}"
        )
        if action == "watch":
            log.warning("%s (watch mode: no action; %s stays frozen)", what, BEST_DIR)
        elif action == "rollback":
            self.st.lr_scale = cut_lr(
                self.st.lr_scale, self.cfg.guard_lr_scale, getattr(self.cfg, "guard_lr_floor", 0.0)
            )
            self.learner.lr_scale = self.st.lr_scale
            self.restore_best()
            log.warning(
                "%s: rolled back to step %d's policy (rollback %d of %d), learning rate x%g",
                what,
                self.st.best_step,
                self.st.rollbacks,
                self.cfg.guard_max_rollbacks,
                self.st.lr_scale,
            )
        else:
            self.restore_best()
            log.warning("%s: training stops; the final model is step %d's policy", what, self.st.best_step)
