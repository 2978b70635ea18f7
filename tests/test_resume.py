"""A run killed with SIGKILL at several points resumes as if nothing happened."""
import json

import pytest

from serl.config import ConfigError, TrainConfig, dump


def metrics(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        out.append({k: v for k, v in m.items() if not k.startswith("time/") and k != "wall_time"})
    return out


def pool_events(run_dir):
    return [json.loads(l) for l in (run_dir / "pool.jsonl").read_text().splitlines() if l.strip()]


@pytest.mark.slow
def test_sigkill_at_rollout_update_and_checkpoint_then_resume_is_exact(tmp_path, serl_train, tiny_train_args):
    a, b = tmp_path / "a", tmp_path / "b"
    r = serl_train("--run_dir", str(a), *tiny_train_args)
    assert r.returncode == 0, r.stderr[-3000:]

    kills = ["generate:2", "checkpoint:2", "learner:3"]
    r = serl_train("--run_dir", str(b), *tiny_train_args, fault=kills[0])
    assert r.returncode == -9, r.stderr[-3000:]
    for fault in kills[1:] + [None]:
        r = serl_train("--resume", str(b), fault=fault)
        assert r.returncode == (-9 if fault else 0), (fault, r.stderr[-3000:])
        if fault == "checkpoint:2":  # the half-written checkpoint never looks complete
            assert not (b / "checkpoints/step_000002/COMPLETE").exists()

    ma, mb = metrics(a), metrics(b)
    assert [m["step"] for m in mb] == [1, 2, 3]          # continuous, nothing duplicated
    assert ma == mb                                       # the same run, to the last digit

    adds = lambda d: [e["item"] for e in pool_events(d) if e["e"] == "add"]
    ids = [i["id"] for i in adds(b)]
    assert len(ids) == len(set(ids))                      # no problem duplicated...
    assert [i["text"] for i in adds(a)] == [i["text"] for i in adds(b)]  # ...or lost

    from serl.checkpoint import complete_checkpoints
    ckpts = complete_checkpoints(b)
    assert [c.name for c in ckpts] == ["step_000002", "step_000003"]  # keeps the newest 2
    from transformers import AutoModelForCausalLM
    AutoModelForCausalLM.from_pretrained(ckpts[-1] / "policy")        # the final checkpoint loads
    assert not list((b / "checkpoints").glob(".tmp-*"))


@pytest.mark.parametrize("flag, value", [
    ("--learner", "deepspeed"),         # another engine: other numerics, other optimizer state
    ("--train_batch_size", "4"),        # the batch shape: optimizer steps per training step
    ("--advantage_estimator", "rloo"),
    ("--reward_difficulty_bounds", "0.1 0.9"),
])
def test_resume_refuses_run_defining_changes(tmp_path, flag, value):
    from serl.train import resume_config

    dump(TrainConfig(steps=3), tmp_path / "config.yaml")
    with pytest.raises(ConfigError, match=f"option '{flag[2:]}' was .* that makes it a different run"):
        resume_config(tmp_path, [flag, *value.split()])
    assert not (tmp_path / "config_changes.jsonl").exists()


def test_resume_refuses_a_different_run_and_records_harmless_changes(tmp_path):
    from serl.train import resume_config

    dump(TrainConfig(steps=3), tmp_path / "config.yaml")
    with pytest.raises(ConfigError, match="option 'advantage_estimator'"):
        resume_config(tmp_path, ["--advantage_estimator", "rloo"])
    with pytest.raises(ConfigError, match="option 'model'"):
        resume_config(tmp_path, ["--pretrain", "other"])
    cfg = resume_config(tmp_path, ["--steps", "5", "--progress", "plain"])
    assert cfg.steps == 5
    change = json.loads((tmp_path / "config_changes.jsonl").read_text().splitlines()[-1])
    assert change["changes"]["steps"] == {"was": 3, "now": 5}


def test_resume_of_missing_dir_exits_2(tmp_path, serl_train):
    r = serl_train("--resume", str(tmp_path / "nope"))
    assert r.returncode == 2 and "run directory not found" in r.stderr
