"""A tiny real SeRL run with --async_train and the importance-sampling correction on the
transformers generator, and its exact resume after a kill at the start of a step."""
import json

import pytest

pytestmark = pytest.mark.slow

ASYNC = ["--async_train", "--importance_sampling_correction", "--max_staleness", "2", "--save_steps", "1"]


def _metrics(run_dir):
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in m.items() if not k.startswith("time/") and k != "wall_time"} for m in rows]


def test_async_run_lags_one_version_and_resumes_exactly(tmp_path, tiny_train_args, serl_train):
    a, b = tmp_path / "a", tmp_path / "b"
    r = serl_train(*tiny_train_args, *ASYNC, "--run_dir", a)
    assert r.returncode == 0, r.stderr[-3000:]
    ma = _metrics(a)
    assert [m["step"] for m in ma] == [1, 2, 3]
    assert ma[0]["async/lag_max"] == 0.0  # the first batch is collected before any update
    assert all(m.get("async/unsampled", 0.0) == 0.0 for m in ma)  # every trained sequence was found sampled
    assert all(m.get("async/behaviour_missing", 0.0) == 0.0 for m in ma)  # with its log-probs
    updated = [m for m in ma if "actor/updates" in m]
    assert updated, ma
    if "actor/updates" in ma[0]:  # collect(2) ran while update 1 ran: one version behind
        assert ma[1]["async/lag_max"] >= 1.0
    for m in updated:
        # the generator's log-probs of its own samples (fp32, same weights at lag 0): weights near 1;
        # a token off by one or a wrong temperature would put them far from it
        assert 0.5 < m["actor/is_weight_mean"] < 2.0 and m["actor/is_weight_max"] <= 2.0 + 1e-6, m
        assert 0.0 <= m["actor/is_capped_frac"] <= 1.0
    if ma[0].get("actor/is_weight_mean") is not None:
        assert ma[0]["actor/is_weight_mean"] == pytest.approx(1.0, abs=0.05)

    killed = serl_train(*tiny_train_args, *ASYNC, "--run_dir", b, fault="generate:3")
    assert killed.returncode != 0 and (b / "checkpoints").exists()
    r = serl_train("--resume", b, "--progress", "quiet")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _metrics(b) == ma  # the batch collected ahead for step 3 was kept in the step-2 checkpoint
