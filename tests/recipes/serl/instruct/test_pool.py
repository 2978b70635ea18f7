import json
import random
from dataclasses import asdict

import pytest

from serl.data.seeds import Problem
from serl.recipes.serl.instruct.pool import POOL_FILE, PoolError, PromptPool


def _seeds(n=10):
    return [
        Problem(text=f"Seed problem number {i}: what is {i} + {i}?", label=str(2 * i), meta={"idx": i})
        for i in range(n)
    ]


def _snapshot(pool):
    return [asdict(it) for it in pool.items()]


def _two_steps(run_dir):
    pool = PromptPool.create(run_dir, _seeds())
    a, b = pool.add_generated(
        ["Gen A: what is 7 times 6?", "Gen B: what is 9 squared?"], step=1, parents=[["s0", "s1"], ["s2"]]
    )
    pool.record_rollout(a.id, 1, 0.5, "42", True, None)
    pool.record_rollout(b.id, 1, 0.9375, "81", False, "too_easy")
    pool.flush()
    return pool


def test_create_and_reload_round_trip(tmp_path):
    pool = _two_steps(tmp_path)
    again = PromptPool.load(tmp_path)
    assert _snapshot(again) == _snapshot(pool)
    g0 = again.get("g0")
    assert (g0.status, g0.parents, g0.source, g0.step) == ("kept", ["s0", "s1"], "generated", 1)
    assert g0.history == [{"step": 1, "agreement": 0.5, "label": "42", "kept": True, "reason": None}]
    g1 = again.get("g1")
    assert (g1.status, g1.filter, g1.reason) == ("filtered", "difficulty", "too_easy")
    assert again.get("s3").meta == {"idx": 3} and again.get("s3").label == "6"
    # loading and continuing appends after the committed state
    again.add_generated(["Gen C: how many primes below 30?"], step=2, parents=[["g0"]])
    again.flush()
    assert [it.id for it in PromptPool.load(tmp_path).generated()] == ["g0", "g1", "g2"]


def test_create_refuses_existing_pool(tmp_path):
    PromptPool.create(tmp_path, _seeds())
    with pytest.raises(PoolError, match="already exists"):
        PromptPool.create(tmp_path, _seeds())
    with pytest.raises(PoolError, match="no prompt pool"):
        PromptPool.load(tmp_path / "elsewhere")


def test_unflushed_events_are_not_on_disk(tmp_path):
    pool = _two_steps(tmp_path)
    pool.add_generated(["Gen C: not flushed, how many?"], step=2, parents=[[]])
    assert len(PromptPool.load(tmp_path).generated()) == 2


def _committed_offsets(path):
    raw = path.read_bytes()
    ends, off = [], 0
    for line in raw.split(b"\n")[:-1]:
        off += len(line) + 1
        if json.loads(line)["e"] == "commit":
            ends.append(off)
    return raw, ends


@pytest.mark.parametrize("cut", ["before_commit", "mid_event", "mid_commit", "one_byte"])
def test_torn_flush_reloads_previous_commit(tmp_path, cut):
    """A crash between appending a step's events and writing its commit line."""
    before = _snapshot(_two_steps(tmp_path))
    pool = PromptPool.load(tmp_path)
    pool.add_generated(["Gen C: what is 5 cubed?", "Gen D: what is 2 to the 10?"], step=2, parents=[["s0"], ["g0"]])
    pool.record_rollout("g0", 2, 0.4, "42", True, None)
    pool.flush()
    path = tmp_path / POOL_FILE
    raw, ends = _committed_offsets(path)
    last_group = raw[ends[-2] : ends[-1]]
    commit_start = ends[-2] + last_group.rstrip(b"\n").rfind(b"\n") + 1
    torn_len = {
        "before_commit": commit_start,
        "mid_event": ends[-2] + 20,
        "mid_commit": commit_start + 7,
        "one_byte": ends[-1] - 1,
    }[cut]
    path.write_bytes(raw[:torn_len])
    reloaded = PromptPool.load(tmp_path)
    assert _snapshot(reloaded) == before
    assert path.read_bytes() == raw[: ends[-2]]  # torn tail cut off
    # the run goes on and its next flush is readable
    reloaded.add_generated(["Gen E: what is 3 factorial?"], step=2, parents=[["s1"]])
    reloaded.flush()
    assert [it.text for it in PromptPool.load(tmp_path).generated()][-1] == "Gen E: what is 3 factorial?"


def test_garbage_before_a_commit_is_an_error(tmp_path):
    _two_steps(tmp_path)
    path = tmp_path / POOL_FILE
    lines = path.read_bytes().split(b"\n")
    lines[3] = b"{not json"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(PoolError, match=r"pool.jsonl:4"):
        PromptPool.load(tmp_path)


def test_load_until_step_resumes_an_older_checkpoint(tmp_path):
    before = _snapshot(_two_steps(tmp_path))
    pool = PromptPool.load(tmp_path)
    pool.add_generated(["Gen C: what is 5 cubed?"], step=2, parents=[["s0"]])
    pool.flush(step=2)
    assert _snapshot(PromptPool.load(tmp_path, until_step=1)) == before
    assert len(PromptPool.load(tmp_path).generated()) == 2  # step 2 was cut from the file


def test_a_header_of_the_older_format_still_loads(tmp_path):
    _two_steps(tmp_path)
    path = tmp_path / POOL_FILE
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    lines[0] = json.dumps(dict(header, replay_window=1))  # written before the option was removed
    path.write_text("\n".join(lines) + "\n")
    assert PromptPool.load(tmp_path).get("g0").status == "kept"


def test_fewshot_mix_and_stats(tmp_path):
    pool = PromptPool.create(tmp_path, _seeds(10))
    texts = [f"Generated {i}: what is {i} times 3?" for i in range(5)]
    gen = pool.add_generated(texts, step=1, parents=[["s0"]] * 5)
    for it, ok in zip(gen, [True, True, True, False, False]):
        pool.record_rollout(it.id, 1, 0.5 if ok else 1.0, None, ok, None if ok else "too_easy")
    rng = random.Random(0)
    for _ in range(20):
        shots = pool.fewshot_examples(rng, 8, 2)
        srcs = [s.source for s in shots]
        assert len(shots) == 8 and srcs.count("generated") == 2
        assert {s.id for s in shots if s.source == "generated"} <= {"g0", "g1", "g2"}
        assert len({s.id for s in shots}) == 8
    fresh = PromptPool.create(tmp_path / "b", _seeds(10))
    assert all(s.source == "seed" for s in fresh.fewshot_examples(rng, 8, 2))
    assert pool.stats() == {
        "pool/size": 15.0,
        "pool/seeds": 10.0,
        "pool/generated": 5.0,
        "pool/pending": 0.0,
        "pool/kept": 3.0,
        "pool/filtered": 2.0,
    }
    assert pool.known_texts()[:10] == [s.text for s in _seeds(10)]
    assert pool.known_texts()[10:] == texts


def test_bad_arguments(tmp_path):
    pool = PromptPool.create(tmp_path, _seeds(2))
    with pytest.raises(KeyError):
        pool.add_generated(["x y z w"], 1, [["s9"]])
    with pytest.raises(ValueError):
        pool.add_generated(["x y z w"], 1, [])
    with pytest.raises(KeyError):
        pool.record_rollout("g5", 1, 0.5, None, True, None)
    with pytest.raises(ValueError):
        PromptPool.create(tmp_path / "c", [])
