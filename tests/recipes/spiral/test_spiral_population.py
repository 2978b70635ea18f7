import json
from collections import Counter

import pytest

from serl.recipes.spiral.population import CURRENT, SnapshotPool


@pytest.mark.parametrize("size", [0, -3])
def test_pool_size_below_one_refused(size):
    with pytest.raises(ValueError, match="population size must be >= 1"):
        SnapshotPool(size=size)


def test_add_every_below_one_refused():
    with pytest.raises(ValueError, match="add_every"):
        SnapshotPool(add_every=0)


def test_fifo_with_current():
    pool = SnapshotPool(size=3, add_every=5)
    assert pool.entries() == [CURRENT]
    assert pool.add("s5") == [] and pool.add("s10") == []
    assert pool.entries() == ["s5", "s10", CURRENT]
    assert pool.add("s15") == ["s5"]
    assert pool.entries() == ["s10", "s15", CURRENT]


@pytest.mark.parametrize("step,due", [(0, False), (1, False), (4, False), (5, True), (10, True), (11, False)])
def test_due(step, due):
    assert SnapshotPool(size=25, add_every=5).due(step) == due


def test_size_one_is_pure_self_play():
    pool = SnapshotPool(size=1)
    assert not pool.due(5) and pool.add("s5") == ["s5"]
    assert pool.sample(3) == [CURRENT] * 3


def test_without_current():
    pool = SnapshotPool(size=2, include_current=False)
    assert pool.entries() == [CURRENT]  # nothing else to play yet
    pool.add("a")
    assert pool.entries() == ["a"]
    pool.add("b")
    assert pool.add("c") == ["a"] and pool.entries() == ["b", "c"]


def test_snapshot_named_current_refused():
    with pytest.raises(ValueError, match="cannot be named"):
        SnapshotPool(size=3).add(CURRENT)


def test_uniform_draw():
    pool = SnapshotPool(size=4, seed=1)
    for p in ("a", "b", "c"):
        pool.add(p)
    counts = Counter(pool.sample(4000))
    assert set(counts) == {"a", "b", "c", CURRENT}
    assert all(850 <= c <= 1150 for c in counts.values())


def test_state_dict_resumes_exactly():
    pool = SnapshotPool(size=3, add_every=2, seed=5)
    pool.add("a")
    pool.add("b")
    pool.sample(7)
    state = json.loads(json.dumps(pool.state_dict()))
    expected = pool.sample(20)
    other = SnapshotPool(size=1)
    other.load_state_dict(state)
    assert (other.size, other.add_every, other.capacity) == (3, 2, 2)
    assert other.entries() == ["a", "b", CURRENT]
    assert other.sample(20) == expected


@pytest.mark.parametrize("state", [{}, {"size": 0, "add_every": 1, "include_current": True, "snapshots": [],
                                       "rng": [3, [0], None]}, None])
def test_malformed_state_refused(state):
    with pytest.raises(ValueError, match="population"):
        SnapshotPool().load_state_dict(state)
