"""serl.data.novelty: the ROUGE-L novelty index (SeRL's pool and SPELL's questions) against rouge-score."""

import random

import pytest
from rouge_score import rouge_scorer

from serl.data.novelty import RougeIndex

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


@pytest.mark.parametrize(
    "cand,expected_f,rejected",
    [
        # 10 vs 10 tokens, LCS 7: F1 = 2*7/20 = 0.7 exactly -> not above the threshold
        (WORDS[:7] + ["kilo", "lima", "mike"], 0.7, False),
        # LCS 8 of 10 vs 9 tokens: F1 = 16/19 = 0.842 -> rejected
        (WORDS[:8] + ["kilo"], 16 / 19, True),
        # 10 vs 11 tokens, LCS 7: F1 = 14/21 = 0.667 -> passes
        (WORDS[:7] + ["kilo", "lima", "mike", "november"], 14 / 21, False),
        # same multiset, reversed order: LCS 1, F1 = 0.1 even though the bag overlap is full
        (WORDS[::-1], 0.1, False),
    ],
)
def test_rouge_threshold_boundary(cand, expected_f, rejected):
    idx = RougeIndex(0.7)
    idx.add(" ".join(WORDS))
    bad, score, _ = idx.too_similar(" ".join(cand))
    assert bad == rejected
    assert idx.brute_force_max(" ".join(cand)) == pytest.approx(expected_f)
    if rejected:
        assert score == pytest.approx(expected_f)


def test_rouge_index_matches_rouge_score_pairwise():
    # The pruned index must reject exactly when some pair scored by rouge-score's public
    # API exceeds the threshold, on texts that share much of their vocabulary.
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(30)]
    known = [" ".join(rng.choices(vocab, k=rng.randint(5, 20))) for _ in range(200)]
    cands = [" ".join(rng.choices(vocab, k=rng.randint(5, 20))) for _ in range(100)]
    cands += [k.replace("w1 ", "w2 ", 1) for k in known[:50]]  # near copies
    idx = RougeIndex(0.5)
    for k in known:
        idx.add(k)
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    n_rejected = 0
    for c in cands:
        best = max(scorer.score(k, c)["rougeL"].fmeasure for k in known)
        bad, score, _ = idx.too_similar(c)
        assert bad == (best > 0.5 + 1e-9)
        if bad:
            n_rejected += 1
    assert 50 <= n_rejected < len(cands)  # both outcomes exercised
