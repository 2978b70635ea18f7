"""Shuffled passes over a recipe's data (serl.data.passes)."""

import random

from serl.data.passes import Passes


def test_passes_visit_every_item_once_per_pass_and_resume_in_order():
    a = Passes(4, random.Random(0))
    first = a.take(6)  # a whole pass, then two of the next
    assert sorted(first[:4]) == [0, 1, 2, 3] and len(set(first[4:])) == 2
    b = Passes(4, random.Random(123))
    b.load_state_dict(a.state_dict())
    assert b.take(2) == a.take(2)  # the rest of the pass, in the same order
    # the permutation is random.shuffle's of range(n), drawn only when a pass starts
    want = list(range(4))
    random.Random(0).shuffle(want)
    assert first[:4] == want
