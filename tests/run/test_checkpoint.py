"""Checkpoints and the final model on disk: a full disk gives one clear error, leaves the
previous checkpoint intact and nothing half-written; the final model/ holds the weights
(or the LoRA adapter), never the optimizer state. A tiny random Llama keeps it fast."""

import subprocess
from collections import namedtuple
from types import SimpleNamespace

import pytest
import torch

import serl.run.checkpoint as ckpt_mod
from serl.engines.torch_learner import STATE_FILE, LearnerConfig, TorchLearner
from serl.run.checkpoint import (
    DiskFullError,
    checkpoint_dir,
    complete_checkpoints,
    newest_step,
    restore_reference,
    save_checkpoint,
)


def _learner(path, **kw):
    return TorchLearner(
        path,
        LearnerConfig(actor_learning_rate=1e-2, lr_warmup_ratio=0.0, total_steps=10, micro_batch_size=2, seed=0, **kw),
        need_ref=False,
    )


def _weights(learner):
    return {n: t.detach().clone() for n, t in learner.named_weights()}


@pytest.fixture
def small_fs(tmp_path):
    """A real 4 MiB filesystem (tmpfs); skipped where mounting needs rights the test lacks."""
    d = tmp_path / "fs"
    d.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs here ({r.stderr.decode().strip()[:80]}); "
            f"test_disk_full_as_torch_reports_it covers the logic"
        )
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(fs, leave: int):
    """A ballast file that leaves about ``leave`` bytes free on ``fs``."""
    import shutil

    free = shutil.disk_usage(fs).free
    with open(fs / "ballast", "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return fs / "ballast"


# what is left free for the second checkpoint: too little for the weights (safetensors says
# "No space left"), or room for the weights but not the optimizer state (torch says only
# "unexpected pos ... vs ...")
@pytest.mark.parametrize("leave,writer", [("quarter", "SafetensorError"), ("weights", "RuntimeError")])
def test_disk_full_on_a_real_small_filesystem(small_fs, tiny_path, leave, writer):
    run_dir = small_fs / "run"
    ln = _learner(tiny_path)
    first = save_checkpoint(run_dir, 1, ln, {"step": 1, "blob": torch.zeros(20_000)}, keep=2)
    sizes = {p.name: p.stat().st_size for p in (first / "policy").iterdir()}
    total = sum(p.stat().st_size for p in first.rglob("*") if p.is_file())
    room = total // 4 if leave == "quarter" else sizes["model.safetensors"] + 3 * 4096 + sizes[STATE_FILE] // 3
    ballast = _fill(small_fs, room)
    before = _weights(ln)
    with pytest.raises(DiskFullError) as e:
        save_checkpoint(run_dir, 2, ln, {"step": 2, "blob": torch.zeros(20_000)}, keep=2)
    assert type(e.value.__cause__).__name__ == writer, repr(e.value.__cause__)
    msg = str(e.value)
    assert msg.startswith(f"out of disk space writing the checkpoint of step 2 to {run_dir / 'checkpoints'} (")
    assert f"free of 4.0 MB on the filesystem of {run_dir}" in msg
    assert f"The newest complete checkpoint, step 1 ({first}), is intact." in msg
    assert msg.endswith(f"then continue with: serl train --resume {run_dir}")
    assert "--max_ckpt_num" in msg
    # nothing half-written; the previous checkpoint loads
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000001"]
    other = _learner(tiny_path)
    other.load(str(first / "policy"))
    assert all(torch.equal(before[k], v) for k, v in _weights(other).items())
    # space freed: the same write goes through
    ballast.unlink()
    save_checkpoint(run_dir, 2, ln, {"step": 2}, keep=2)
    assert [c.name for c in complete_checkpoints(run_dir)] == ["step_000001", "step_000002"]


class _TorchFullDisk:
    """Fails as torch.save does on a full disk: a RuntimeError that never says so."""

    def save(self, path, state=True):
        from pathlib import Path

        Path(path).mkdir(parents=True)
        (Path(path) / "model.safetensors").write_bytes(b"x" * 1000)
        try:
            raise RuntimeError("basic_ios::clear: iostream error")
        except RuntimeError as inner:
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . unexpected pos 353973120 vs 353973012"
            ) from inner


class _Good:
    def save(self, path, state=True):
        from pathlib import Path

        Path(path).mkdir(parents=True)
        (Path(path) / "model.safetensors").write_bytes(b"w" * 3000)


Usage = namedtuple("Usage", "total used free")


@pytest.mark.parametrize("free,full", [(0, True), (4 << 20, True), (64 << 30, False)])
def test_disk_full_as_torch_reports_it(tmp_path, monkeypatch, free, full):
    """torch's error text never says "No space": the free space after the failed write
    decides (under 16 MB: full). Any other failure passes through unchanged. Either way
    the partial checkpoint is removed."""
    run_dir = tmp_path / "run"
    save_checkpoint(run_dir, 1, _Good(), {"step": 1})
    monkeypatch.setattr(ckpt_mod.shutil, "disk_usage", lambda p: Usage(100 << 30, (100 << 30) - free, free))
    if full:
        with pytest.raises(DiskFullError) as e:
            save_checkpoint(run_dir, 2, _TorchFullDisk(), {"step": 2})
        msg = str(e.value)
        free_mb = f"{free / 2**20:.1f} MB"
        assert (
            f"({free_mb} free of 100.00 GB on the filesystem of {run_dir}, after removing the partial "
            f"write; one checkpoint takes 0.0 MB)" in msg
        )
        assert "step 1 (" in msg and "is intact" in msg and f"serl train --resume {run_dir}" in msg
        assert "unexpected pos" not in msg  # the cause is kept as __cause__, not shown
    else:
        with pytest.raises(RuntimeError, match="unexpected pos") as e:
            save_checkpoint(run_dir, 2, _TorchFullDisk(), {"step": 2})
        assert type(e.value) is RuntimeError
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000001"]


def test_disk_full_errno_is_recognised_whatever_is_free(tmp_path, monkeypatch):
    import errno

    class Enospc:
        def save(self, path, state=True):
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(DiskFullError, match="No checkpoint of this run is complete yet"):
        save_checkpoint(tmp_path / "run", 1, Enospc(), {})
    assert list((tmp_path / "run" / "checkpoints").iterdir()) == []


def test_cli_prints_one_line_and_exits_2(monkeypatch, capsys):
    import serl.cli.train

    def full(cfg, resume_dir=None):
        raise DiskFullError("out of disk space writing the checkpoint of step 3 to X")

    monkeypatch.setattr(serl.cli.train, "launch", full)
    assert serl.cli.train.main(["--generator", "hf"]) == 2
    err = capsys.readouterr().err
    assert err == "serl train: error: out of disk space writing the checkpoint of step 3 to X\n"


def test_final_model_holds_weights_config_and_no_optimizer_state(tmp_path, monkeypatch, smol_path, tiny_path):
    """The runner's final save: model/ is a Hugging Face model that loads and equals the
    learner's weights; the optimizer state is only in the checkpoint."""
    from transformers import AutoModelForCausalLM

    import serl.config.registry
    import serl.run.runner as runner
    from serl.config.registry import config_class
    from serl.recipes.base import Recipe
    from serl.run.step import Collected

    ln = _learner(tiny_path)

    class OneStep(Recipe):
        @classmethod
        def eval_set(cls, cfg):
            return []

        def collect(self, step):  # trained here; the loop has nothing to train
            ln.step(_batch())
            return Collected(None, {"fake/x": 1.0})

    monkeypatch.setattr(serl.config.registry, "recipe_class", lambda name: OneStep)
    monkeypatch.setattr("serl.report.write.write_report", lambda run_dir: None)
    engines = SimpleNamespace(
        generator=SimpleNamespace(load_weights=lambda w: None), learner=ln, checker=None, close=lambda: None
    )
    cfg = config_class("serl")(model=smol_path, steps=1, run_dir=str(tmp_path / "run"), progress="quiet")
    run_dir = runner.run(cfg, start_engines=lambda cfg, plan, model_path: engines)
    names = sorted(p.name for p in (run_dir / "model").iterdir())
    assert "config.json" in names and "model.safetensors" in names
    assert not [n for n in names if n.endswith(".pt")], names  # no learner_state.pt, no other state
    assert (complete_checkpoints(run_dir)[-1] / "policy" / STATE_FILE).is_file()  # resume still has it
    loaded = dict(AutoModelForCausalLM.from_pretrained(run_dir / "model", dtype=torch.float32).named_parameters())
    want = _weights(ln)
    assert set(want) <= set(loaded) and all(torch.equal(loaded[k], want[k]) for k in want)


def _batch():
    from serl.engines.base import TrainBatch

    prompts, responses = [[3, 4, 5], [6, 7]], [[20, 21], [22, 23, 24]]
    return TrainBatch(prompts, responses, [torch.ones(2), -torch.ones(3)])


def test_final_lora_model_is_a_peft_adapter_only(tmp_path, tiny_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ln = _learner(tiny_path, lora_rank=4, lora_alpha=8.0)
    ln.step(_batch())
    ln.save(str(tmp_path / "model"), state=False)
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_path), str(tmp_path / "model"))
    theirs = {n.removeprefix("base_model.model."): p for n, p in model.named_parameters() if ".lora_" in n}
    ours = {n: p for n, p in ln.lora.adapter_params()}
    assert set(theirs) == set(ours) and all(torch.equal(theirs[k], ours[k]) for k in ours)
    assert any(p.abs().max() > 0 for k, p in ours.items() if "lora_B" in k)  # it trained


def test_newest_step_and_the_reference_of_a_lagging_window(tmp_path):
    assert newest_step(tmp_path) == 0
    for s in (3, 5):
        checkpoint_dir(tmp_path, s).mkdir(parents=True)
        (checkpoint_dir(tmp_path, s) / "COMPLETE").write_text(f"{s}\n")
    checkpoint_dir(tmp_path, 6).mkdir()  # not complete: not a checkpoint
    assert newest_step(tmp_path) == 5
    learner = SimpleNamespace(loads=[], syncs=0)
    learner.load = learner.loads.append
    learner.sync_ref = lambda: setattr(learner, "syncs", learner.syncs + 1)
    restore_reference(tmp_path, learner, 3, 5)
    assert [p.split("/")[-2] for p in learner.loads] == ["step_000003", "step_000005"] and learner.syncs == 1
    with pytest.raises(RuntimeError, match="step_000004"):
        restore_reference(tmp_path, learner, 4, 5)


def test_the_resume_hint_names_the_last_complete_checkpoint(tmp_path):
    """What a run stopped by a failed step (a reward server down) adds to its one-line error."""
    from serl.run.checkpoint import DONE, checkpoint_dir, resume_hint

    assert "no checkpoint had been saved yet" in resume_hint(tmp_path)
    for step, done in ((2, True), (3, True), (4, False)):  # step 4: a write that never finished
        checkpoint_dir(tmp_path, step).mkdir(parents=True)
        if done:
            (checkpoint_dir(tmp_path, step) / DONE).write_text(f"{step}\n")
    msg = resume_hint(tmp_path)
    assert f"the last checkpoint, {checkpoint_dir(tmp_path, 3)} (step 3), is intact" in msg
    assert f"serl train --resume {tmp_path}" in msg
