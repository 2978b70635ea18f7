"""The SPIN recipe's step logic on stand-in engines (fast): the reference refresh for both
schedules in both modes, pair construction, the iteration plan, and state round trips.

The stand-in learner's log-probs are ``-(version + 1)`` per token, where ``version`` is
the number of updates it has taken, so a batch's reference log-probs say which policy
wrote them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from serl.config.parser import parse_args
from serl.data.seeds import Problem
from serl.engines.base import Completion
from serl.recipes.spin.config import Config as SpinConfig
from serl.recipes.spin.config import iteration_steps
from serl.recipes.spin.recipe import SpinRecipe, answer_ids
from serl.run import state as run_state
from serl.run.context import RunContext
from serl.run.loop import Loop

END = 99


class Tok:
    """Characters as token ids; ChatML's end of turn is END."""

    unk_token_id, eos_token_id = 0, 98

    def apply_chat_template(self, msgs, add_generation_prompt=True, tokenize=False):
        return "U:" + msgs[0]["content"] + "|A:"

    def convert_tokens_to_ids(self, t):
        return END if t == "<|im_end|>" else self.unk_token_id

    def __call__(self, text, add_special_tokens=False, split_special_tokens=False):
        return {"input_ids": [ord(ch) % 90 + 1 for ch in text]}


class Gen:
    """Answer k (k = 0..n-1) to a prompt is '\\boxed{<answers[k]>}'."""

    def __init__(self, answers=("1", "2")):
        self.answers, self.calls = answers, 0

    def generate(self, prompts, n, sampling):
        self.calls += 1
        out = []
        for p in prompts:
            ids = list(p)  # prompts arrive as ids
            out.append(
                [
                    Completion(f"\\boxed{{{self.answers[k % len(self.answers)]}}}", [40 + k, 41, END], ids)
                    for k in range(n)
                ]
            )
        return out

    def load_weights(self, named):
        list(named)


class Learner:
    def __init__(self):
        self.version, self.ref_version = 0, 0
        self.batches, self.policy_scores, self.syncs, self.loads = [], [], [], []

    def logprobs(self, prompt_ids, response_ids, model="policy"):
        v = self.version if model == "policy" else self.ref_version
        if model == "policy":
            self.policy_scores.append(self.version)
        return [torch.full((len(r),), -(v + 1.0)) for r in response_ids]

    def step(self, batch):
        self.batches.append(batch)
        self.version += 1
        return {"loss/policy": 0.0}

    def sync_ref(self):
        self.syncs.append(self.version)
        self.ref_version = self.version

    def load(self, path):
        self.loads.append(path)

    def named_weights(self):
        return iter(())


PROBLEMS = [Problem(f"p{i}", label="1", solution=f"s{i}") for i in range(4)]


def make(tmp_path, *flags, problems=PROBLEMS, gen=None, checker=None):
    cfg, _ = parse_args(["--recipe", "spin", "--rollout_batch_size", "2", "--seed", "3", *flags])
    learner = Learner()
    ctx = RunContext(cfg, tmp_path, "m", Tok(), gen or Gen(), learner, checker, None, "quiet")
    return SpinRecipe(ctx, problems), learner, cfg


def test_spin_reference_refreshes_at_iteration_starts(tmp_path):
    # iteration 0: 4 pairs / 2 = 2 steps; iteration 1: 4 new + 4 previous = 4 steps
    r, learner, cfg = make(tmp_path, "--epochs_per_iteration", "1")
    assert not SpinConfig.SPEC.reference(cfg) and cfg.ref_update == "iteration"
    ms = [r.step(s) for s in range(1, 7)]
    assert learner.policy_scores == [0, 2]  # scored once per iteration, by the policy then
    refs = [float(b.ref_logprobs[0][0]) for b in learner.batches]
    assert refs == [-1, -1, -3, -3, -3, -3]
    assert [m["spin/iteration"] for m in ms] == [0, 0, 1, 1, 1, 1]
    assert [len(b.pairs) for b in learner.batches] == [2] * 6
    assert ms[2]["spin/pairs"] == 8 and ms[2]["spin/pairs_previous"] == 4
    assert [iteration_steps(cfg, 4, t) for t in (0, 1)] == [2, 4]
    # every pair: chosen = the human answer, rejected = an own answer (both end with END)
    b = learner.batches[0]
    for c, j in b.pairs:
        assert b.response_ids[c][-1] == END and b.response_ids[j] in ([40, 41, END],)
        assert b.response_ids[c] in [answer_ids(Tok(), p.solution) for p in PROBLEMS]


def test_spin_steps_schedule_refreshes_inside_the_iteration(tmp_path):
    r, learner, _ = make(tmp_path, "--epochs_per_iteration", "1", "--ref_update", "steps:2")
    for s in range(1, 7):
        r.step(s)
    # iteration starts (steps 1, 3) and every 2 steps inside iteration 1 (step 5)
    assert learner.policy_scores == [0, 2, 4]
    assert [float(b.ref_logprobs[0][0]) for b in learner.batches] == [-1, -1, -3, -3, -5, -5]


def test_spin_mixing_and_epochs(tmp_path):
    r, learner, cfg = make(
        tmp_path,
        "--epochs_per_iteration",
        "2",
        "--mix_previous",
        "0.5",
        "--iteration_size",
        "2",
        "--n_samples_per_prompt",
        "2",
    )
    plan = [iteration_steps(cfg, 4, t) for t in range(2)]
    assert plan == [2 * 2, 2 * 3]  # 4 pairs; then 4 + round(0.5 * 4) = 6 pairs, 3 steps per epoch
    ms = [r.step(s) for s in range(1, sum(plan) + 2)]
    assert [m["spin/iteration"] for m in ms] == [0] * 4 + [1] * 6 + [2]
    assert ms[4]["spin/pairs"] == 6 and ms[4]["spin/pairs_previous"] == 2
    # each epoch visits every pair once
    first = learner.batches[:2]
    seen = sorted((tuple(b.response_ids[c]), tuple(b.prompt_ids[c])) for b in first for c, _ in b.pairs)
    again = sorted((tuple(b.response_ids[c]), tuple(b.prompt_ids[c])) for b in learner.batches[2:4] for c, _ in b.pairs)
    assert seen == again and len(seen) == 4


def test_online_steps_1_scores_the_reference_with_the_policy_before_the_update(tmp_path):
    from serl.rewards import EquivalenceChecker

    with EquivalenceChecker(workers=1) as checker:
        r, learner, cfg = make(tmp_path, "--spin_mode", "online", "--reward_mode", "rule", checker=checker)
        assert cfg.ref_update == "steps:1" and cfg.n_samples_per_prompt == 2
        assert not SpinConfig.SPEC.reference(cfg)
        ms = [r.step(s) for s in range(1, 4)]
    assert learner.policy_scores == [0, 1, 2] and learner.syncs == []
    assert [float(b.ref_logprobs[0][0]) for b in learner.batches] == [-1, -2, -3]
    # label 1: answer "1" (k=0) is right and chosen, "2" wrong and rejected
    b = learner.batches[0]
    assert [b.response_ids[c][0] for c, _ in b.pairs] == [40, 40]
    assert [b.response_ids[j][0] for _, j in b.pairs] == [41, 41]
    assert ms[0]["pairs/pairs"] == 2 and ms[0]["reward/mean"] == 0.5


def test_online_steps_n_keeps_a_reference_model_and_syncs_every_n(tmp_path):
    from serl.rewards import EquivalenceChecker

    with EquivalenceChecker(workers=1) as checker:
        r, learner, cfg = make(
            tmp_path,
            "--spin_mode",
            "online",
            "--reward_mode",
            "majority",
            "--n_samples_per_prompt",
            "3",
            "--ref_update",
            "steps:3",
            "--save_steps",
            "3",
            gen=Gen(("1", "1", "2")),
            checker=checker,
        )
        assert SpinConfig.SPEC.reference(cfg)
        for s in range(1, 8):
            r.step(s)
    assert learner.policy_scores == []  # the learner's own reference scores the batches
    assert all(b.ref_logprobs is None for b in learner.batches)
    assert learner.syncs == [3, 6]  # at the start of steps 4 and 7


def test_online_ties_are_dropped_and_counted(tmp_path):
    from serl.rewards import EquivalenceChecker

    with EquivalenceChecker(workers=1) as checker:
        r, learner, _ = make(
            tmp_path, "--spin_mode", "online", "--reward_mode", "rule", gen=Gen(("1", "1")), checker=checker
        )
        m = r.step(1)
    assert m["pairs/tied"] == 2 and m["pairs/pairs"] == 0 and learner.batches == []


@pytest.mark.parametrize("at", [1, 2, 3])
def test_state_round_trip_continues_the_same_steps(tmp_path, at):
    a, la, _ = make(tmp_path, "--epochs_per_iteration", "1")
    for s in range(1, at + 1):
        a.step(s)
    state = run_state.capture(a, at)
    b, lb, _ = make(tmp_path, "--epochs_per_iteration", "1")
    lb.version = la.version
    run_state.restore(b, state)
    for s in range(at + 1, 7):
        a.step(s)
        b.step(s)
    for x, y in zip(la.batches[at:], lb.batches):
        assert (x.prompt_ids, x.response_ids, x.pairs) == (y.prompt_ids, y.response_ids, y.pairs)
        assert all(torch.equal(p, q) for p, q in zip(x.ref_logprobs, y.ref_logprobs))


def test_online_resume_inside_a_window_restores_the_reference(tmp_path):
    r, learner, _ = make(tmp_path, "--spin_mode", "online", "--ref_update", "steps:3", "--save_steps", "3")
    loop = Loop(r.cfg, r.plan, SimpleNamespace(generator=r.generator, learner=r.learner), r, run_dir=tmp_path)
    loop.done = 5  # as a resume after step 5 leaves it
    with pytest.raises(RuntimeError, match="step_000003"):
        loop.reload_reference()  # the checkpoint of step 3 (the window's reference) is missing
    for s in (3, 5):
        d = tmp_path / "checkpoints" / f"step_{s:06d}"
        d.mkdir(parents=True)
        (d / "COMPLETE").write_text(f"{s}\n")
    loop.reload_reference()
    assert [p.split("/")[-2] for p in learner.loads] == ["step_000003", "step_000005"]
    assert learner.syncs == [0]
    learner.loads.clear()
    loop.done = 6  # a window end: the next step refreshes
    loop.reload_reference()
    assert learner.loads == []
