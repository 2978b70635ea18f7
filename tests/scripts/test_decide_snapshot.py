"""The policy an experiment evaluates (experiments/serl_efficacy/run.py ``snapshot``): the
segment's merged model when it is the newest checkpoint's step, else that checkpoint's adapter
merged here (a run stopped between its evaluation points), never an older merged model; an
earlier checkpoint (``step``) is always merged from its own adapter, never from a newer merged model."""
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/engines"))
from test_lora import _batch, _cfg  # noqa: E402


@pytest.fixture()
def run_mod(experiment):
    return experiment("run")


def _weights(path):
    from transformers import AutoModelForCausalLM

    return dict(AutoModelForCausalLM.from_pretrained(str(path)).named_parameters())


def test_snapshot_merges_a_checkpoint_newer_than_the_merged_model(tmp_path, run_mod, save_tiny):
    from serl.engines.torch_learner import TorchLearner
    from serl.run.checkpoint import save_checkpoint

    base = save_tiny(tmp_path / "base")
    run_dir = tmp_path / "run"
    ln = TorchLearner(base, _cfg(), need_ref=False)
    ln.step(_batch(ln, 0))
    save_checkpoint(run_dir, 1, ln, {"step": 1})
    ln.export_hf(str(run_dir / "model_merged"))  # the segment ended at step 1
    at_1 = {k: v.detach().clone() for k, v in ln.named_weights()}
    assert run_mod.snapshot(run_dir, tmp_path / "s1", base) == 1
    assert all(torch.equal(_weights(tmp_path / "s1")[k], v) for k, v in at_1.items())

    ln.step(_batch(ln, 1))  # a resumed segment, stopped after step 2: the merged model is step 1's
    save_checkpoint(run_dir, 2, ln, {"step": 2})
    old = (run_dir / "model_merged").stat().st_mtime - 60
    for f in (run_dir / "model_merged").iterdir():
        os.utime(f, (old, old))
    assert run_mod.snapshot(run_dir, tmp_path / "s2", base) == 2
    got = _weights(tmp_path / "s2")
    assert all(torch.equal(got[k], v) for k, v in ln.named_weights())
    assert not torch.equal(got["model.layers.0.self_attn.q_proj.weight"], at_1["model.layers.0.self_attn.q_proj.weight"])
    assert (tmp_path / "s2" / "STEP").read_text() == "2\n"

    ln.export_hf(str(run_dir / "model_merged"))  # a later segment's merged model (step 2)
    assert run_mod.snapshot(run_dir, tmp_path / "s3", base, step=1) == 1
    assert all(torch.equal(_weights(tmp_path / "s3")[k], v) for k, v in at_1.items())
    with pytest.raises(FileNotFoundError, match="step_000007"):
        run_mod.snapshot(run_dir, tmp_path / "s4", base, step=7)
