"""The population of past selves: the pool's bookkeeping, and the snapshot files it writes and deletes."""

import json
from collections import Counter

import pytest
import torch

from serl.recipes.spiral.population import Population, SnapshotPool
from serl.recipes.spiral.snapshots import CURRENT, load_snapshot


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


@pytest.mark.parametrize(
    "state", [{}, {"size": 0, "add_every": 1, "include_current": True, "snapshots": [], "rng": [3, [0], None]}, None]
)
def test_malformed_state_refused(state):
    with pytest.raises(ValueError, match="population"):
        SnapshotPool().load_state_dict(state)


def _complete_checkpoint(run_dir, step):
    d = run_dir / "checkpoints" / f"step_{step:06d}"
    d.mkdir(parents=True)
    (d / "COMPLETE").write_text(f"{step}\n")


def test_population_writes_snapshots_and_deletes_an_evicted_one_only_after_a_newer_checkpoint(tmp_path):
    pop = Population(tmp_path, size=2, add_every=1, seed=3)  # the current policy and one snapshot
    assert pop.add(1, [("w", torch.ones(2))]) == "snapshots/step_000001.safetensors"
    w = load_snapshot(tmp_path / "snapshots/step_000001.safetensors")
    assert w["w"].dtype == torch.bfloat16 and w["w"].tolist() == [1.0, 1.0]
    assert pop.size() == 2 and set(pop.sample(50)) == {"snapshots/step_000001.safetensors", CURRENT}
    pop.add(2, [("w", torch.zeros(2))])  # pushes step 1 out of the pool
    assert pop.state_dict()["trash"] == [(2, "snapshots/step_000001.safetensors")]
    _complete_checkpoint(tmp_path, 1)  # a checkpoint from before the eviction still needs the file
    pop.empty_trash()
    assert (tmp_path / "snapshots/step_000001.safetensors").is_file()
    _complete_checkpoint(tmp_path, 2)
    pop.empty_trash()
    assert not (tmp_path / "snapshots/step_000001.safetensors").exists()
    assert pop.state_dict()["trash"] == []
    assert pop.path(pop.pool.snapshots[0]) == str(tmp_path / "snapshots/step_000002.safetensors")


def test_population_state_resumes_the_draws_and_refuses_a_missing_snapshot(tmp_path):
    pop = Population(tmp_path, size=3, add_every=1, seed=7)
    pop.add(1, [("w", torch.ones(1))])
    state = json.loads(json.dumps(pop.state_dict()))
    expected = pop.sample(20)
    again = Population(tmp_path, size=3, add_every=1)
    again.load_state_dict(state)
    assert again.sample(20) == expected
    (tmp_path / "snapshots/step_000001.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="population snapshot snapshots/step_000001.safetensors is missing"):
        Population(tmp_path, size=3, add_every=1).load_state_dict(state)
