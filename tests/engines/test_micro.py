"""Micro-batch layouts, padded and packed, written out by hand."""

import pytest
import torch

from serl.engines.micro import micro_batches, pad_values, rank_units

PROMPTS = [[3, 4, 5], [6, 7]]
RESPONSES = [[20, 21], [22, 23, 24, 25]]


def test_packed_layout_by_hand():
    # longest first: sequence 1 (2 + 4 tokens), then sequence 0 (3 + 2) at offset 6
    (mb,) = micro_batches(PROMPTS, RESPONSES, size=2, pad_id=0, pack=True)
    assert mb.packed and mb.index == [1, 0] and mb.attention_mask is None
    assert mb.input_ids.tolist() == [[6, 7, 22, 23, 24, 25, 3, 4, 5, 20, 21]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4]]
    assert mb.seq_lens == (6, 5)
    # response tokens are predicted from the position before each: 1..4, then 6 + 2..3
    assert mb.pred_rows.tolist() == [0] * 6
    assert mb.pred_cols.tolist() == [1, 2, 3, 4, 8, 9]
    assert mb.targets.tolist() == [22, 23, 24, 25, 20, 21]
    assert mb.resp_mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert mb.lengths == [4, 2]


def test_padded_layout_by_hand():
    (mb,) = micro_batches(PROMPTS, RESPONSES, size=2, pad_id=0, pack=False)
    assert not mb.packed and mb.position_ids is None
    assert mb.input_ids.tolist() == [[6, 7, 22, 23, 24, 25], [3, 4, 5, 20, 21, 0]]
    assert mb.attention_mask.tolist() == [[1] * 6, [1] * 5 + [0]]
    assert mb.pred_rows.tolist() == [0, 0, 0, 0, 1, 1]
    assert mb.pred_cols.tolist() == [1, 2, 3, 4, 2, 3]
    assert mb.targets.tolist() == [22, 23, 24, 25, 20, 21]


@pytest.mark.parametrize(
    "pack, budget, want",
    [
        # lengths, longest first (ties keep their order): seq 1 has 6 tokens, 0 and 2 have 5, 3 has 3
        (True, 11, [[1, 0], [2, 3]]),  # packed: 6 + 5 = 11 fits; then 5 + 3
        (True, 10, [[1], [0, 2], [3]]),  # 6 + 5 > 10; 5 + 5 = 10 fits, + 3 does not
        (True, 19, [[1, 0, 2, 3]]),  # all 19 tokens in one row
        (False, 12, [[1, 0], [2, 3]]),  # padded: rows x the longest, 2 x 6 = 12; then 2 x 5
        (False, 17, [[1, 0], [2, 3]]),  # a third row would make 3 x 6 = 18
        (True, 4, [[1], [0], [2], [3]]),  # a sequence longer than the budget still gets its own
    ],
)
def test_token_budget_cuts_micro_batches_by_hand(pack, budget, want):
    prompts, responses = [[3, 4, 5], [6, 7], [8, 9], [1]], [[20, 21], [22, 23, 24, 25], [26, 27, 28], [29, 30]]
    mbs = micro_batches(prompts, responses, size=1, pad_id=0, pack=pack, max_tokens=budget)
    assert [mb.index for mb in mbs] == want  # the budget replaces the count (size=1 would split all)


def test_token_budget_keeps_pairs_whole():
    prompts, responses = [[3, 4, 5], [3, 4, 5], [6, 7], [6, 7]], [[20, 21], [22], [23, 24, 25], [26]]
    mbs = micro_batches(prompts, responses, size=1, pad_id=0, units=[[0, 1], [2, 3]], pack=True, max_tokens=9)
    assert [mb.index for mb in mbs] == [[0, 1], [2, 3]]  # 5 + 4 = 9 fits; another pair of 8 would not
    assert all(mb.pairs.tolist() == [[0, 1]] for mb in mbs)


@pytest.mark.parametrize("pack", [False, True])
def test_pairs_stay_together_and_values_follow_the_rows(pack):
    prompts = [[3], [4, 5], [6], [7, 8, 9, 9]]
    responses = [[10], [11, 12], [13, 14, 15], [16]]
    mbs = micro_batches(prompts, responses, size=2, pad_id=0, units=[[0, 1], [2, 3]], pack=pack)
    assert [sorted(mb.index) for mb in mbs] == [[2, 3], [0, 1]]  # pair (2, 3) is the longer
    assert all(mb.pairs.tolist() == [[0, 1]] for mb in mbs)
    values = [torch.tensor([1.0]), torch.tensor([2.0, 3.0]), torch.tensor([4.0, 5.0, 6.0]), torch.tensor([7.0])]
    rows = pad_values(values, mbs[0].index, mbs[0].resp_mask, "advantages", mbs[0].lengths)
    assert rows.tolist() == [[4.0, 5.0, 6.0], [7.0, 0.0, 0.0]]
    with pytest.raises(ValueError, match=r"advantages\[2\] has 3 entries, response has 1"):
        pad_values(values, [2], torch.zeros(1, 1, dtype=torch.bool), "advantages", [1])


# ------------------------------------------------------------------ shared prompts
# two prompts, A = [3, 4, 5] (sequences 0, 2, 4) and B = [6, 7] (sequences 1, 3)
SP_PROMPTS = [[3, 4, 5], [6, 7], [3, 4, 5], [6, 7], [3, 4, 5]]
SP_RESPONSES = [[20, 21], [22, 23, 24], [25], [26, 27], [28, 29, 30]]


def test_shared_prompts_layout_by_hand():
    # longest sequence: 3 + 3 = 6 tokens, so size 3 allows 18 tokens; A's block takes
    # 3 + 2 + 1 + 3 = 9, B's 2 + 3 + 2 = 7: both fit in one row of 16 tokens
    (mb,) = micro_batches(SP_PROMPTS, SP_RESPONSES, size=3, pad_id=0, pack=True, share_prompts=True)
    assert mb.packed and mb.attention_mask is None
    assert mb.index == [0, 2, 4, 1, 3]  # A's bundle first (its longest sequence is longer)
    #      column:                0  1  2   3   4   5   6   7   8  9 10  11  12  13  14  15
    assert mb.input_ids.tolist() == [[3, 4, 5, 20, 21, 25, 28, 29, 30, 6, 7, 22, 23, 24, 26, 27]]
    # each response's positions continue from its prompt's length
    assert mb.position_ids.tolist() == [[0, 1, 2, 3, 4, 3, 3, 4, 5, 0, 1, 2, 3, 4, 2, 3]]
    assert mb.seq_lens == (9, 7)
    assert mb.shared == ((3, (2, 1, 3)), (2, (3, 2)))
    # first token of each response: from its prompt's last column (2 for A, 10 for B);
    # the others from the response's own previous column
    assert mb.pred_rows.tolist() == [0] * 11
    assert mb.pred_cols.tolist() == [2, 3, 2, 2, 6, 7, 10, 11, 12, 10, 14]
    assert mb.targets.tolist() == [20, 21, 25, 28, 29, 30, 22, 23, 24, 26, 27]
    assert mb.lengths == [2, 1, 3, 3, 2] and mb.pairs is None
    assert mb.resp_mask.tolist() == [
        [True, True, False],
        [True, False, False],
        [True] * 3,
        [True] * 3,
        [True, True, False],
    ]


def test_shared_prompts_cut_by_tokens():
    # size 2 allows 12 tokens: A's block (9) fills the first row, B's (7) does not fit beside it
    mbs = micro_batches(SP_PROMPTS, SP_RESPONSES, size=2, pad_id=0, pack=True, share_prompts=True)
    assert [(mb.index, mb.seq_lens, mb.shared) for mb in mbs] == [
        ([0, 2, 4], (9,), ((3, (2, 1, 3)),)),
        ([1, 3], (7,), ((2, (3, 2)),)),
    ]
    # size 1 (6 tokens): A's block splits after 3 + 2 + 1, each micro-batch writing A again
    mbs = micro_batches(SP_PROMPTS, SP_RESPONSES, size=1, pad_id=0, pack=True, share_prompts=True)
    assert [mb.shared for mb in mbs] == [((3, (2, 1)),), ((3, (3,)),), ((2, (3,)),), ((2, (2,)),)]
    assert mbs[1].input_ids.tolist() == [[3, 4, 5, 28, 29, 30]] and mbs[1].pred_cols.tolist() == [2, 3, 4]


def test_shared_prompts_keep_pairs_in_unit_order():
    # pair (0, 1) and pair (2, 3): chosen with prompt P = [3, 4], rejected with Q = [5]
    prompts, responses = [[3, 4], [5], [3, 4], [5]], [[10], [11, 12], [13], [14]]
    (mb,) = micro_batches(prompts, responses, size=3, pad_id=0, units=[[0, 1], [2, 3]], pack=True, share_prompts=True)
    # the row groups by prompt (P, its responses 0 and 2, then Q, 1 and 3) ...
    assert mb.input_ids.tolist() == [[3, 4, 10, 13, 5, 11, 12, 14]]
    assert mb.position_ids.tolist() == [[0, 1, 2, 2, 0, 1, 2, 1]]
    assert mb.shared == ((2, (1, 1)), (1, (2, 1)))
    # ... while the response rows keep the pairs' order, so pairs are rows (0, 1), (2, 3)
    assert mb.index == [0, 1, 2, 3] and mb.pairs.tolist() == [[0, 1], [2, 3]]
    assert mb.pred_cols.tolist() == [1, 4, 5, 1, 4]
    assert mb.targets.tolist() == [10, 11, 12, 13, 14]


def test_shared_prompts_need_packing_and_empty_responses_add_no_piece():
    with pytest.raises(ValueError, match="share_prompts needs the packed layout"):
        micro_batches(SP_PROMPTS, SP_RESPONSES, size=2, pad_id=0, share_prompts=True)
    (mb,) = micro_batches([[3, 4], [3, 4]], [[], [5]], size=2, pad_id=0, pack=True, share_prompts=True)
    assert mb.input_ids.tolist() == [[3, 4, 5]] and mb.shared == ((2, (1,)),) and mb.lengths == [0, 1]
    assert mb.pred_cols.tolist() == [1]


def test_rank_units_keep_a_prompt_together():
    # units ordered by prompt (A: 0, 2, 4; B: 1, 3), then cut into contiguous shares
    units = [[i] for i in range(5)]
    assert [rank_units(units, SP_PROMPTS, r, 2) for r in (0, 1)] == [[[0], [2]], [[4], [1], [3]]]
    assert rank_units(units, SP_PROMPTS, 0, 1) == [[0], [2], [4], [1], [3]]
