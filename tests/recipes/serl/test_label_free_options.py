"""Issue 62's label-free options of the SeRL recipe against numbers worked out by hand:
cut answers scored (DAPO's soft overlong penalty, ProRL's stop-properly penalty), CuMa's
no-majority mask, RESTRAIN's negative penalty and agreement weight, the easy-first curriculum.

Advantages use ``dr_grpo`` without KL (s = r - group mean, the same on every token, not
whitened), so every number below is a sum a reader can redo."""

import json
import random
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from serl import ConfigError
from serl.config.compat import rewrite
from serl.config.parser import parse_args
from serl.config.plan import plan_run
from serl.engines.base import Completion
from serl.recipes.serl.config import SerlConfig
from serl.recipes.serl.instruct.pool import PoolItem
from serl.recipes.serl.recipe import Rollout, SerlRecipe
from serl.recipes.serl.shaping import CurriculumPasses, easy_first, overlong_penalty, score_cut_answers
from serl.rewards.equivalence import EquivalenceChecker
from serl.rewards.vote import GroupScore

MAX_LEN = 16


def _group(name, answers, lengths, cluster_sizes, source="majority"):
    """A group's rollout: answer i has lengths[i] tokens, cut when it reaches MAX_LEN."""
    label = max(set(a for a in answers if a), key=answers.count)
    rewards = [1.0 if a == label else 0.0 for a in answers]
    group = [
        Completion(str(a), list(range(n)), [1, 2], "length" if n >= MAX_LEN else "stop")
        for a, n in zip(answers, lengths)
    ]
    score = GroupScore(
        rewards,
        answers,
        label,
        sum(rewards) / len(rewards),
        len(cluster_sizes),
        answers.count(None),
        False,
        source,
        cluster_sizes,
    )
    return Rollout(PoolItem(name, name, None, "seed", 0, [], "kept"), group, score)


# G1: votes 4 4 4 5 5 6 4 -, majority "4" with share 4/8 = 0.5, rewards 1 1 1 0 0 0 1 0;
# answers 2, 4 and 7 hit the 16-token limit (cut).
G1 = dict(
    answers=["4", "4", "4", "5", "5", "6", "4", None], lengths=[8, 13, 16, 10, 16, 14, 12, 16], cluster_sizes=[4, 2, 1]
)
# G2: votes 7 7 7 8 8 9 9 -, majority "7" with share 3/8 = 0.375, rewards 1 1 1 0 0 0 0 0; none cut.
G2 = dict(answers=["7", "7", "7", "8", "8", "9", "9", None], lengths=[5] * 8, cluster_sizes=[3, 2, 2])


def _batch(rollouts, **opts):
    cfg = SerlConfig(advantage_estimator="dr_grpo", init_kl_coef=0.0, generate_max_len=MAX_LEN, **opts)
    cfg.validate_label_free()
    learner = SimpleNamespace(logprobs=None)  # no KL: no log-prob pass
    fake = SimpleNamespace(cfg=cfg, plan=plan_run(cfg), learner=learner, timed=lambda name: nullcontext())
    metrics: dict = {}
    batch = SerlRecipe.make_batch(fake, rollouts, metrics)
    for a in batch.advantages:  # dr_grpo: one value on every token of a response
        assert torch.all(a == a[0])
    return [float(a[0]) for a in batch.advantages], metrics


@pytest.mark.parametrize(
    "length,buffer,factor,want",
    [
        (10, 4, 1.0, 0.0),  # before max_len - buffer = 12: no penalty
        (12, 4, 1.0, 0.0),  # at 12: none yet
        (13, 4, 1.0, -0.25),  # 1 of 4 buffer tokens
        (14, 4, 1.0, -0.5),
        (16, 4, 1.0, -1.0),  # at the limit: the whole factor
        (20, 4, 1.0, -1.0),  # capped at the factor
        (14, 4, 0.5, -0.25),
        (16, 0, 1.0, 0.0),  # buffer 0: off
    ],
)
def test_overlong_penalty(length, buffer, factor, want):
    assert overlong_penalty(length, MAX_LEN, buffer, factor) == want


# G1's rewards 1 1 1 0 0 0 1 0 under each option, and dr_grpo's r - mean (the mean in the comment)
CUT_CASES = [
    ({}, [1, 1, 1, 0, 0, 0, 1, 0], {}),  # defaults: unchanged; mean 0.5
    # cut answers (2, 4, 7) scored 0: mean 3/8
    ({"stop_properly_penalty_coef": 0.0}, [1, 1, 0, 0, 0, 0, 1, 0], {"reward/stop_properly_scored": 3}),
    # cut answers get -0.5: mean 1.5/8 = 0.1875
    ({"stop_properly_penalty_coef": -0.5}, [1, 1, -0.5, 0, -0.5, 0, 1, -0.5], {"reward/stop_properly_scored": 3}),
    # soft penalty over the last 4 tokens: lengths 13, 14, 16 lose 0.25, 0.5, 1; mean 0.25/8 = 0.03125
    (
        {"overlong_buffer_len": 4},
        [1, 0.75, 0, 0, -1, -0.5, 1, -1],
        {"reward/overlong_penalized": 5, "reward/overlong_penalty_mean": -0.75},
    ),
    # both, in OpenRLHF's order: soft (factor 0.5) first, then the cut ones times 0; mean 2.625/8
    (
        {"overlong_buffer_len": 4, "overlong_penalty_factor": 0.5, "stop_properly_penalty_coef": 0.0},
        [1, 0.875, 0, 0, 0, -0.25, 1, 0],
        {"reward/overlong_penalized": 5, "reward/stop_properly_scored": 3},
    ),
]


@pytest.mark.parametrize("source", ["majority", "rule", "remote"])  # every reward mode
@pytest.mark.parametrize("opts,rewards,counts", CUT_CASES)
def test_cut_answers_scored(opts, rewards, counts, source):
    adv, metrics = _batch([_group("g1", **G1, source=source)], **opts)
    mean = sum(rewards) / 8
    assert adv == [r - mean for r in rewards]
    assert metrics["train/reward_mean"] == pytest.approx(mean)
    assert metrics["train/masked_truncated"] == 0  # scored, not masked
    for k, v in counts.items():
        assert metrics[k] == v


def test_score_cut_answers_by_hand():
    # rewards, lengths, cut; max 16, buffer 4, factor 1, then cut ones times 0.5
    out, m = score_cut_answers([1, 1, 0], [12, 14, 16], [False, False, True], 16, 4, 1.0, 0.5)
    assert out == [1.0, 0.5, -0.5]  # 1 - 0; 1 - 0.5; (0 - 1) * 0.5
    assert m == {
        "reward/overlong_penalized": 2,
        "reward/overlong_penalty_mean": -0.75,
        "reward/stop_properly_scored": 1,
    }


G1_ADV = [0.5, 0.5, 0.5, -0.5, -0.5, -0.5, 0.5, -0.5]  # rewards 1 1 1 0 0 0 1 0, mean 0.5
G2_ADV = [0.625, 0.625, 0.625] + [-0.375] * 5  # rewards 1 1 1 0 0 0 0 0, mean 0.375


@pytest.mark.parametrize(
    "opts,want,metrics_want",
    [
        ({}, G1_ADV + G2_ADV, {}),
        # CuMa: G2's majority 3/8 < 0.4: left out
        ({"min_majority_share": 0.4}, G1_ADV, {"train/masked_no_majority": 1, "train/sequences": 8}),
        # a threshold at G1's share masks nothing (below, not at)
        ({"min_majority_share": 0.375}, G1_ADV + G2_ADV, {"train/masked_no_majority": 0}),
        # RESTRAIN: G2's rewards zeroed (its advantages 0), then -0.2 on each of its tokens
        (
            {"min_majority_share": 0.4, "no_majority_penalty": 0.2},
            G1_ADV + [-0.2] * 8,
            {"train/penalized_no_majority": 1, "train/sequences": 16},
        ),
        # weight share^1: G1 x 0.5, G2 x 0.375 (0.625 x 0.375 = 0.234375, -0.375 x 0.375 = -0.140625)
        (
            {"agreement_weight_power": 1.0},
            [a * 0.5 for a in G1_ADV] + [0.234375] * 3 + [-0.140625] * 5,
            {"train/agreement_weight_mean": 0.4375},
        ),
        # share^2: G1 x 0.25, G2 x 9/64 (45/512 and -27/512)
        ({"agreement_weight_power": 2.0}, [a * 0.25 for a in G1_ADV] + [0.087890625] * 3 + [-0.052734375] * 5, {}),
        # penalty, then weight: G2's -0.2 x 0.375
        (
            {"min_majority_share": 0.4, "no_majority_penalty": 0.2, "agreement_weight_power": 1.0},
            [a * 0.5 for a in G1_ADV] + [-0.075] * 8,
            {},
        ),
    ],
)
def test_no_majority_mask_penalty_and_weight(opts, want, metrics_want):
    adv, metrics = _batch([_group("g1", **G1), _group("g2", **G2)], **opts)
    assert adv == pytest.approx(want, abs=1e-7)
    for k, v in metrics_want.items():
        assert metrics[k] == v


def test_labelled_groups_are_neither_masked_nor_weighted():
    """A rule-scored group (auto mode, a seed with a label) has a label, not a vote: G2 as a
    rule group keeps its advantages under both options."""
    adv, metrics = _batch(
        [_group("g1", **G1), _group("g2", **G2, source="rule")],
        min_majority_share=0.4,
        agreement_weight_power=1.0,
        reward_mode="auto",
    )
    assert adv == [a * 0.5 for a in G1_ADV] + G2_ADV
    assert metrics["train/masked_no_majority"] == 0


def test_every_group_masked_gives_no_batch():
    cfg = SerlConfig(advantage_estimator="dr_grpo", init_kl_coef=0.0, min_majority_share=0.9)
    fake = SimpleNamespace(cfg=cfg, plan=plan_run(cfg), learner=None, timed=lambda name: nullcontext())
    metrics: dict = {}
    assert SerlRecipe.make_batch(fake, [_group("g1", **G1)], metrics) is None
    assert metrics["train/masked_no_majority"] == 1


# ---- the curriculum ------------------------------------------------------------------------------
def test_easy_first_and_its_passes():
    order = easy_first([0.5, 0.875, 0.5, 0.125])
    assert order == [1, 0, 2, 3]  # highest share first; equal shares keep their order
    p = CurriculumPasses(order)
    assert p.take(6) == [1, 0, 2, 3, 1, 0]  # the same order every pass
    q = CurriculumPasses(order)
    q.load_state_dict(p.state_dict())
    assert q.take(3) == [2, 3, 1]


# the probe's answers per seed: shares 4/8, 7/8, 4/8 and 2/8 (a None counts in n)
PROBE = {
    0: ["1"] * 4 + ["2"] * 3 + [None],
    1: ["5"] * 7 + ["6"],
    2: ["3"] * 4 + ["9"] * 4,
    3: ["7", "7", "8", "9", "10", "11", None, None],
}


def test_curriculum_probe_orders_the_seeds(tmp_path):
    seeds = [PoolItem(f"s{i}", f"seed {i}", None, "seed", 0, [], "kept") for i in range(4)]

    def sample(prompts, n):
        return [[Completion(f"\\boxed{{{a}}}" if a else "no idea", [1], p) for a in PROBE[p[0]]] for p in prompts]

    cfg = SerlConfig(n_samples_per_prompt=8, rollout_batch_size=3, curriculum="agreement", enable_self_evolution=False)
    with EquivalenceChecker(workers=1) as checker:
        fake = SimpleNamespace(
            cfg=cfg,
            pool=SimpleNamespace(seeds=lambda: seeds),
            prompt_tokens=lambda t: 1,
            prompt_max_len=10,
            timed=lambda name: nullcontext(),
            progress="quiet",
            sample=sample,
            chat_prompt=lambda t: [int(t.split()[1])],
            checker=checker,
            tok=None,
            rng=random.Random(0),
            run_dir=tmp_path,
            counts={"batch/skipped_long": 0},
            drawn=[],
        )
        metrics: dict = {}
        SerlRecipe.probe_curriculum(fake, metrics)
    assert fake.curriculum == [0.5, 0.875, 0.5, 0.25]
    assert metrics == {"curriculum/probed": 4, "curriculum/probe_share_mean": 0.53125}
    got = [it.id for it in SerlRecipe.next_seeds(fake, 5)]
    assert got == ["s1", "s0", "s2", "s3", "s1"]  # easiest first, then again from the start
    assert fake.drawn == [0.875, 0.5, 0.5, 0.25, 0.875]
    rows = [json.loads(line) for line in (tmp_path / "curriculum.jsonl").read_text().splitlines()]
    assert rows[0] == {"id": "s1", "share": 0.875}


# ---- the options' checks ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--overlong_filter", "--stop_properly_penalty_coef", "0"], "choose one"),
        (["--overlong_filter", "--overlong_buffer_len", "64"], "choose one"),
        (["--overlong_buffer_len", "300", "--generate_max_len", "256"], "overlong_buffer_len: must lie in"),
        (["--stop_properly_penalty_coef", "1.5"], "stop_properly_penalty_coef: must be in"),
        (["--overlong_penalty_factor", "-1"], "overlong_penalty_factor: must be >= 0"),
        (["--min_majority_share", "1.5"], "min_majority_share: must be in"),
        (["--agreement_weight_power", "-1"], "agreement_weight_power: must be >= 0"),
        (["--no_majority_penalty", "0.2"], "no_majority_penalty: acts on the groups below"),
        (["--min_majority_share", "0.5", "--reward_mode", "rule", "--enable_self_evolution", "false"], "votes on none"),
        (["--curriculum", "agreement"], "curriculum: orders the seed problems"),
    ],
)
def test_bad_combinations_are_refused(flags, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_args(flags)


def test_openrlhf_dotted_names_reach_the_options():
    cfg = parse_args(
        rewrite(
            [
                "--reward.overlong_buffer_len",
                "64",
                "--reward.overlong_penalty_factor",
                "0.5",
                "--reward.stop_properly_penalty_coef",
                "-0.5",
            ]
        )
    )[0]
    assert (cfg.overlong_buffer_len, cfg.overlong_penalty_factor, cfg.stop_properly_penalty_coef) == (64, 0.5, -0.5)


def test_defaults_change_nothing():
    cfg = SerlConfig()
    assert (
        cfg.overlong_buffer_len,
        cfg.stop_properly_penalty_coef,
        cfg.min_majority_share,
        cfg.no_majority_penalty,
        cfg.agreement_weight_power,
        cfg.curriculum,
    ) == (0, 1.0, 0.0, 0.0, 0.0, "none")


@pytest.mark.parametrize("curriculum,want", [("agreement", [2, 3, 1, 0, 2]), ("none", None)])
def test_resume_keeps_the_probed_order(curriculum, want):
    """The checkpoint holds the probe's shares: a resume continues their order without probing;
    one with --curriculum none finishes the pass it is in, then shuffles."""
    from serl.data.passes import Passes

    cfg = SerlConfig(curriculum=curriculum, enable_self_evolution=False)
    fake = SimpleNamespace(
        cfg=cfg,
        rng=random.Random(0),
        seeds=Passes(4, random.Random(0)),
        curriculum=None,
        difficulty=SimpleNamespace(),
        instruct=SimpleNamespace(load_state_dict=lambda s: None),
        pool=None,
    )
    SerlRecipe.load_state_dict(fake, {"seeds": [2, 3], "difficulty": {}, "curriculum": [0.5, 0.875, 0.5, 0.25]})
    if want:
        assert fake.curriculum == [0.5, 0.875, 0.5, 0.25] and fake.seeds.take(5) == want
    else:
        assert fake.curriculum is None and not isinstance(fake.seeds, CurriculumPasses)
        assert fake.seeds.take(2) == [2, 3]
