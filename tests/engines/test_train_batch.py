"""TrainBatch's row helpers: dropping zero-advantage rows and joining role batches."""

import pytest
import torch

from serl.engines.base import TrainBatch


def batch(advs, start=0):
    return TrainBatch(
        [[start + i] for i in range(len(advs))],
        [[10 + start + i, 20] for i in range(len(advs))],
        [torch.tensor(a) for a in advs],
    )


def test_nonzero_rows_keeps_rows_with_any_nonzero_token():
    b = batch([[0.0, 0.0], [0.0, 0.5], [-1.0, -1.0]]).nonzero_rows()
    assert b.prompt_ids == [[1], [2]] and [a.tolist() for a in b.advantages] == [[0.0, 0.5], [-1.0, -1.0]]
    assert batch([[0.0, 0.0]]).nonzero_rows() is None


def test_concat_joins_in_order_and_skips_empty_parts():
    both = TrainBatch.concat([batch([[1.0, 1.0]]), None, TrainBatch([], [], []), batch([[2.0, 0.0]], start=5)])
    assert both.prompt_ids == [[0], [5]] and both.response_ids == [[10, 20], [15, 20]]
    assert [a.tolist() for a in both.advantages] == [[1.0, 1.0], [2.0, 0.0]] and both.old_logprobs is None
    assert TrainBatch.concat([None]) is None and TrainBatch.concat([]) is None
    with pytest.raises(ValueError, match="advantage batches only"):
        TrainBatch.concat([TrainBatch([[1]], [[2]], pairs=[(0, 0)])])


def test_the_behaviour_logprobs_follow_the_rows():
    a, b = batch([[1.0, 1.0], [0.0, 0.0]]), batch([[2.0, 0.0]], start=5)
    a.behaviour_logprobs = [torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -4.0])]
    assert [t.tolist() for t in a.nonzero_rows().behaviour_logprobs] == [[-1.0, -2.0]]
    assert TrainBatch.concat([a, b]).behaviour_logprobs is None  # one part without: none (weights 1)
    b.behaviour_logprobs = [torch.tensor([-5.0, -6.0])]
    assert [t.tolist() for t in TrainBatch.concat([a, b]).behaviour_logprobs] == [
        [-1.0, -2.0],
        [-3.0, -4.0],
        [-5.0, -6.0],
    ]
