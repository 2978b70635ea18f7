"""episode.py: the questioner's format and reward rules, settling a question's rewards, which groups each role trains on, batch assembly."""

import math

import pytest
import torch

from serl.engines.base import Completion, TrainBatch
from serl.recipes.spell import episode
from serl.recipes.spell.corpus import Cluster
from serl.recipes.spell.episode import is_bad_ground, parse_questioner, questioner_reward

C = Cluster("c", ["p"], ["s"])
BAND = (0.51, 0.99)


def comp(text, n=2):
    return Completion(text, list(range(1, n + 1)), [0])


def question(status, rule=(), judges=()):
    q = episode.Question(C, [0], comp("ask"), status, {"question": "q", "answer": "a"})
    q.rule = list(rule)
    q.responses = [comp("r") for _ in rule]
    q.judges = [[comp(t) for t in js] for js in judges]
    return q


@pytest.mark.parametrize(
    "status,rule,judges,rewards,q_reward",
    [
        ("ok", [1.0, 0.0], [["[[YES]]"] * 3, ["[[NO]]"] * 3], [1.0, 0.0], math.exp(-0.0 / (2 / 36))),  # r = 0.5: peak 1
        ("ok", [0.0, 0.0], [["[[YES]]", "[[YES]]", "x"], []], [1.0, 0.0], 1.0),  # verifier lifts one; no judges: rule
        ("ok", [1.0, 1.0], [["[[NO]]"] * 3, ["[[YES]]", "[[NO]]"]], [1.0, 1.0], 0.0),  # all right: 0; tie: rule
        ("bad_ground", [], [], [], -0.5),
        ("bad_format", [], [], [], -1.0),
        ("repeated", [], [], [], None),
        ("too_long", [], [], [], None),
    ],
)
def test_settle(status, rule, judges, rewards, q_reward):
    q = question(status, rule, judges)
    episode.settle(q)
    assert q.rewards == rewards
    assert q.reward == (pytest.approx(q_reward) if q_reward is not None else None)


def test_settle_rule_only_by_hand():
    """--responder_reward rule (the "no verifier reward" control): rule [1, 0, 0, 0], the verifier's
    YES majority on the second answer. max: rewards [1, 1, 0, 0], r = 0.5, questioner exp(0) = 1;
    rule: [1, 0, 0, 0], r = 0.25, questioner exp(-0.25^2 / (2 (1/6)^2)) = exp(-1.125) = 0.32465.
    The majorities are the same either way (the verifier still trains on them)."""
    judges = [["[[YES]]"] * 3, ["[[YES]]", "[[YES]]", "[[NO]]"], ["[[NO]]"] * 3, []]
    full, rule = question("ok", [1.0, 0.0, 0.0, 0.0], judges), question("ok", [1.0, 0.0, 0.0, 0.0], judges)
    episode.settle(full)
    episode.settle(rule, responder="rule")
    assert full.rewards == [1.0, 1.0, 0.0, 0.0] and full.reward == pytest.approx(1.0)
    assert rule.rewards == [1.0, 0.0, 0.0, 0.0] and rule.reward == pytest.approx(0.32465, abs=1e-5)
    assert [m and (m.label, m.share) for m in rule.majorities] == [(1, 1.0), (1, pytest.approx(2 / 3)), (0, 1.0), None]
    assert rule.majorities == full.majorities
    g = episode.RoleGroups()
    g.add(rule, BAND, max_responder=1)
    assert [r for _, r in g.verifier] == [] and g.responder == [(rule.responses, [1.0, 0.0, 0.0, 0.0])]
    with pytest.raises(ValueError, match="responder reward"):
        episode.settle(rule, responder="mean")


def test_groups_per_role():
    q = question(
        "ok",
        [1.0, 0.0, 1.0],
        [
            ["[[YES]]", "[[YES]]", "[[NO]]"],  # share 2/3, agrees: trained
            ["[[NO]]", "[[NO]]", "[[NO]]"],  # unanimous: share 1 > 0.99
            ["[[NO]]", "[[NO]]", "[[YES]]"],
        ],
    )  # majority NO disagrees with rule 1
    episode.settle(q)
    g = episode.RoleGroups()
    g.add(q, BAND, max_responder=1)
    assert [r for _, r in g.verifier] == [[1.0, 1.0, 0.0]]
    assert g.responder == [(q.responses, [1.0, 0.0, 1.0])] and g.questioner == [(q.ask, q.reward)]
    g.add(q, BAND, max_responder=1)  # no room left for another responder group
    assert len(g.responder) == 1 and len(g.questioner) == 2


def test_batches_group_norm_and_zero_rows_dropped():
    def group_batch(groups, rewards):  # the run's estimator, here plain centring, for the arithmetic
        rows = [(c, r - sum(rs) / len(rs)) for g, rs in zip(groups, rewards) for c, r in zip(g, rs)]
        return TrainBatch(
            [c.prompt_ids for c, _ in rows],
            [c.token_ids for c, _ in rows],
            [torch.full((len(c.token_ids),), a) for c, a in rows],
        )

    g = episode.RoleGroups(
        questioner=[(comp("a"), 1.0), (comp("b"), -1.0)], responder=[([comp("x"), comp("y")], [1.0, 1.0])]
    )
    parts = episode.role_batches(g, group_batch)
    assert parts["verifier"] is None
    assert [float(a[0]) for a in parts["questioner"].advantages] == [1.0, -1.0]
    assert parts["responder"].nonzero_rows() is None  # no spread: nothing to learn
    both = TrainBatch.concat([parts["questioner"], parts["responder"].nonzero_rows(), None])
    assert len(both.response_ids) == 2 and TrainBatch.concat([None]) is None


@pytest.mark.parametrize("score,expected", [(0.1, True), (0.099, False), (0.0, False), (1.0, True)])
def test_is_bad_ground(score, expected):
    assert is_bad_ground(score) is expected


@pytest.mark.parametrize(
    "status,mean,expected",
    [
        ("bad_format", None, -1.0),
        ("bad_ground", 0.5, -0.5),
        ("ok", 0.0, 0.0),  # all wrong
        ("ok", 1.0, 0.0),  # all right
        ("ok", 0.5, 1.0),
        ("ok", 0.25, math.exp(-1.125)),  # (0.25)^2 / (2/36) = 1.125
        ("ok", 0.75, math.exp(-1.125)),
        ("ok", 1 / 3, math.exp(-0.5)),  # (1/6)^2 / (2/36) = 0.5
        ("ok", 0.125, math.exp(-2.53125)),  # (0.375)^2 * 18
    ],
)
def test_questioner_reward(status, mean, expected):
    assert questioner_reward(status, mean) == pytest.approx(expected, abs=1e-12)


def test_questioner_reward_values_by_hand():
    assert questioner_reward("ok", 0.25) == pytest.approx(0.32465246735834974)


@pytest.mark.parametrize(
    "status,mean,msg",
    [("weird", 0.5, "unknown questioner status"), ("ok", None, "needs the responder's mean"), ("ok", 1.5, r"\[0, 1\]")],
)
def test_questioner_reward_errors(status, mean, msg):
    with pytest.raises(ValueError, match=msg):
        questioner_reward(status, mean)


def test_parse_questioner_statuses():
    assert parse_questioner('{"question": "Q?", "answer": "Varn"}') == ("ok", {"question": "Q?", "answer": "Varn"})
    assert parse_questioner('Sure. {"question": "How many?", "answer": 12}') == (
        "ok",
        {"question": "How many?", "answer": "12"},
    )
    assert parse_questioner("no json here") == ("bad_format", None)
    assert parse_questioner('{"question": 5, "answer": "x"}') == ("bad_format", None)  # a question is text
    status, qa = parse_questioner('{"question": "Q?", "answer": "%s"}' % ("word " * 60))
    assert status == "too_long" and qa["answer"].startswith("word")
