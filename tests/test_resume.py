"""A run killed with SIGKILL at several points resumes as if nothing happened."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from serl.config import ConfigError, TrainConfig, dump

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--generator", "hf", "--steps", "3", "--rollout_batch_size", "2", "--n_samples_per_prompt", "2",
        "--instructions_num_per_iteration", "2", "--few_shot_generation", "4",
        "--few_shot_generation_batch_size", "2", "--instruction_max_len", "64",
        "--instruction_max_attempts", "2", "--generate_max_len", "24", "--max_refill_rounds", "1",
        "--reward_difficulty_bounds", "0", "1", "--actor_learning_rate", "1e-5", "--progress", "quiet",
        "--save_model", "false", "--save_steps", "1", "--max_ckpt_num", "2",
        "--prompt_data", str(ROOT / "dataset/arith_seed.jsonl")]


def serl_train(*args, fault=None):
    env = dict(os.environ, SERL_FAULT=fault or "")
    return subprocess.run([sys.executable, "-m", "serl.cli", "train", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=900)


def metrics(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        out.append({k: v for k, v in m.items() if not k.startswith("time/") and k != "wall_time"})
    return out


def pool_events(run_dir):
    return [json.loads(l) for l in (run_dir / "pool.jsonl").read_text().splitlines() if l.strip()]


@pytest.mark.slow
def test_sigkill_at_rollout_update_and_checkpoint_then_resume_is_exact(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    r = serl_train("--run_dir", str(a), *TINY)
    assert r.returncode == 0, r.stderr[-3000:]

    kills = ["generate:2", "checkpoint:2", "learner:3"]
    r = serl_train("--run_dir", str(b), *TINY, fault=kills[0])
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


def test_resume_of_missing_dir_exits_2(tmp_path):
    r = serl_train("--resume", str(tmp_path / "nope"))
    assert r.returncode == 2 and "run directory not found" in r.stderr
