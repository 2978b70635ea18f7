import json
from pathlib import Path

import pytest

from serl.rewards import maj_at_k, majority_vote, rule_reward, score_groups, summarize

# The shared data sits next to the repository: ROOT/../shared/data.
DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def test_equivalent_forms_form_one_cluster(checker):
    g = majority_vote(["\\frac{1}{2}", "0.5", "3", "1/2", "3", None], checker)
    assert g.rewards == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    assert g.label == "\\frac{1}{2}"
    assert g.agreement == pytest.approx(3 / 6)
    assert (g.n_clusters, g.n_no_answer, g.tie, g.source) == (2, 1, False, "majority")
    assert g.cluster_sizes == [3, 2]


@pytest.mark.parametrize(
    "answers, rewards, label",
    [
        # 2 vs 2: the cluster whose first member comes first ("7") wins.
        (["7", "8", "8", "7"], [1.0, 0.0, 0.0, 1.0], "7"),
        (["8", "7", "7", "8"], [1.0, 0.0, 0.0, 1.0], "8"),
        # three singletons: the first answer wins
        ([None, "5", "6", "7"], [0.0, 1.0, 0.0, 0.0], "5"),
    ],
)
def test_tie_goes_to_earliest_cluster(checker, answers, rewards, label):
    g = majority_vote(answers, checker)
    assert g.rewards == rewards and g.label == label and g.tie


def test_no_answer_is_never_the_majority(checker):
    g = majority_vote([None, None, None, "4"], checker)
    assert g.rewards == [0.0, 0.0, 0.0, 1.0]
    assert g.label == "4" and g.agreement == 0.25 and g.n_no_answer == 3 and not g.tie


def test_no_answers_at_all(checker):
    g = majority_vote([None, None], checker)
    assert g.rewards == [0.0, 0.0] and g.label is None
    assert (g.agreement, g.n_clusters, g.n_no_answer, g.tie) == (0.0, 0, 2, False)


def test_numbers_in_the_prompt_do_not_count(checker):
    # Only responses are passed in; the prompt's "17" and "5" never appear.
    responses = [["I think it is \\boxed{12}", "so \\boxed{12}", "maybe 9", "no idea"]]
    (g,) = score_groups(responses, None, checker, "majority", fallback="number")
    assert g.answers == ["12", "12", "9", None]
    assert g.rewards == [1.0, 1.0, 0.0, 0.0]


def test_nested_braces_reach_the_vote(checker):
    responses = [["\\boxed{\\frac{\\sqrt{3}}{2}}", "\\boxed{\\frac{\\sqrt3}{2}}", "\\boxed{\\sqrt{3}/2}", "\\boxed{1}"]]
    (g,) = score_groups(responses, None, checker, "majority", fallback="none")
    assert g.rewards == [1.0, 1.0, 1.0, 0.0] and g.n_clusters == 2


@pytest.mark.parametrize(
    "label",
    ["Step...\n#### 12", "\\boxed{12}", "12", " 12.0 "],
)
def test_rule_reward_label_forms(checker, label):
    g = rule_reward(["12", "24/2", None, "13"], label, checker)
    assert g.rewards == [1.0, 1.0, 0.0, 0.0]
    assert g.agreement == 0.5 and g.source == "rule" and g.n_clusters == 2


def test_rule_reward_needs_a_label(checker):
    with pytest.raises(ValueError):
        rule_reward(["1"], None, checker)


def test_auto_mode_mixes_rule_and_vote(checker):
    responses = [["\\boxed{3}", "\\boxed{3}", "\\boxed{4}"], ["\\boxed{3}", "\\boxed{3}", "\\boxed{4}"]]
    a, b = score_groups(responses, ["#### 4", None], checker, mode="auto")
    assert (a.source, a.rewards, a.label) == ("rule", [0.0, 0.0, 1.0], "4")
    assert (b.source, b.rewards, b.label) == ("majority", [1.0, 1.0, 0.0], "3")
    # majority mode ignores labels
    c, _ = score_groups(responses, ["#### 4", None], checker, mode="majority")
    assert c.source == "majority" and c.rewards == [1.0, 1.0, 0.0]


def test_rule_mode_errors(checker):
    with pytest.raises(ValueError, match="group"):
        score_groups([["1"], ["2"]], ["1", None], checker, mode="rule")
    with pytest.raises(ValueError, match="labels"):
        score_groups([["1"]], None, checker, mode="rule")
    with pytest.raises(ValueError, match="mode"):
        score_groups([["1"]], None, checker, mode="vote")


def test_checks_are_bounded_by_n_times_k(checker):
    # 16 answers, 4 distinct values in 8 surface forms: at most n*k verify calls.
    forms = ["\\frac{1}{2}", "0.5", "2", "2.0", "\\sqrt{9}", "3", "\\pi", "\\pi"] * 2
    before = checker.stats["verify_calls"]
    g = majority_vote(forms, checker)
    used = checker.stats["verify_calls"] - before
    assert g.n_clusters == 4 and used <= 16 * 4
    assert g.cluster_sizes == [4, 4, 4, 4] and g.tie and g.label == "\\frac{1}{2}"


def test_maj_at_k_uses_the_vote(checker):
    groups = [["1/2", "0.5", "3"], ["3", "4", "4"], [None, None]]
    assert maj_at_k(groups, ["\\boxed{\\frac12}", "#### 3", "1"], checker) == [True, False, False]


def test_summarize(checker):
    scores = [majority_vote(["1", "1", None, "2"], checker), majority_vote(["5", "6"], checker)]
    s = summarize(scores)
    assert s["reward_mean"] == pytest.approx(3 / 6)
    assert s["agreement_mean"] == pytest.approx((0.5 + 0.5) / 2)
    assert s["ties"] == 1.0 and s["no_answer_rate"] == pytest.approx(1 / 6)


def test_real_math500_answers_agree_with_themselves(checker):
    """Each MATH-500 answer, its boxed solution and a re-spacing cluster together."""
    path = DATA / "math500/test.jsonl"
    if not path.exists():
        pytest.skip(f"shared data not found: {path}")
    rows = [json.loads(line) for line in path.read_text().splitlines()[:40]]
    responses = [
        [r["solution"], "Thus \\boxed{" + r["answer"] + "}", "\\boxed{ " + r["answer"] + " }.", "\\boxed{-1234567}"]
        for r in rows
    ]
    scores = score_groups(responses, None, checker, mode="majority", fallback="none")
    for r, g in zip(rows, scores):
        assert g.rewards == [1.0, 1.0, 1.0, 0.0], (r["unique_id"], g)
    # and the rule reward against the dataset's own answer
    ruled = score_groups(responses, [r["answer"] for r in rows], checker, mode="rule", fallback="none")
    assert all(g.rewards == [1.0, 1.0, 1.0, 0.0] for g in ruled)
