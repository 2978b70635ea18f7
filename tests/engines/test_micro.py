"""Micro-batch layouts, padded and packed, written out by hand."""
import pytest
import torch

from serl.engines.micro import micro_batches, pad_values

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
