"""A resume of a damaged run: the damaged file is named and the newest intact checkpoint taken
(with a warning), or one line saying why not; a bad line of a log is named by file and line.
All of it before any engine starts."""

import json
import logging

import pytest

from serl import ConfigError, DataError
from serl.run.damage import check_logs, checkpoint_damage, intact_checkpoint


def fake_checkpoint(run_dir, step):
    import torch
    from safetensors.torch import save_file

    ckpt = run_dir / "checkpoints" / f"step_{step:06d}"
    (ckpt / "policy").mkdir(parents=True)
    save_file({"w": torch.arange(4096, dtype=torch.float32)}, str(ckpt / "policy" / "model.safetensors"))
    torch.save({"optimizer": torch.zeros(1024)}, ckpt / "policy" / "learner_state.pt")
    (ckpt / "policy" / "config.json").write_text('{"model_type": "llama"}')
    torch.save({"step": step, "rng": list(range(100))}, ckpt / "trainer_state.pt")
    (ckpt / "COMPLETE").write_text(f"{step}\n")
    return ckpt


def cut(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize(
    "name", ["policy/model.safetensors", "trainer_state.pt", "policy/learner_state.pt", "policy/config.json"]
)
def test_a_truncated_file_in_the_newest_checkpoint_is_named_and_the_older_one_taken(tmp_path, caplog, name):
    fake_checkpoint(tmp_path, 1)
    newest = fake_checkpoint(tmp_path, 2)
    assert intact_checkpoint(tmp_path).name == "step_000002"
    cut(newest / name)
    assert checkpoint_damage(newest)[0] == newest / name
    with caplog.at_level(logging.WARNING, logger="serl"):
        assert intact_checkpoint(tmp_path).name == "step_000001"
    text = caplog.text
    assert str(newest / name) in text and "continuing from the newest intact checkpoint, step 1" in text


def test_a_missing_trainer_state_is_damage(tmp_path):
    ckpt = fake_checkpoint(tmp_path, 1)
    (ckpt / "trainer_state.pt").unlink()
    with pytest.raises(ConfigError) as e:
        intact_checkpoint(tmp_path)
    assert "every checkpoint" in str(e.value) and "trainer_state.pt: missing" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_header_lying_about_its_length_is_damage(tmp_path):
    ckpt = fake_checkpoint(tmp_path, 1)
    st = ckpt / "policy" / "model.safetensors"
    st.write_bytes((10**9).to_bytes(8, "little") + st.read_bytes()[8:])
    assert "does not fit" in checkpoint_damage(ckpt)[1]


def make_run(tmp_path, tiny_args, junk_metrics=None, junk_pool=None):
    from serl.config.parser import parse_args
    from serl.data.seeds import Problem
    from serl.recipes.serl.instruct.pool import PromptPool
    from serl.run.resume import write_config

    run = tmp_path / "run"
    run.mkdir()
    cfg, _ = parse_args([*tiny_args, "--run_dir", str(run), "--device", "cpu"])
    write_config(cfg, run)
    fake_checkpoint(run, 1)
    PromptPool.create(run, [Problem("What is 1 + 1?", "2")])
    lines = [json.dumps({"step": 1, "reward": 0.5})]
    if junk_metrics:
        lines.append(junk_metrics)
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if junk_pool:
        with open(run / "pool.jsonl", "a") as f:
            f.write(junk_pool + "\n")
    return run


@pytest.fixture
def no_engines(monkeypatch):
    import serl.engines.factory as factory

    built = []

    def refuse(*a, **k):
        built.append(1)
        raise ConfigError("engines were built: the damage was not found before the model loads")

    monkeypatch.setattr(factory, "build_engines", refuse)
    return built


@pytest.mark.parametrize(
    "which, junk, needle",
    [
        ("metrics", "this is not json", "metrics.jsonl:2: bad metrics line"),
        ("metrics", "[" * 100000, "metrics.jsonl:2: bad metrics line (nested too deeply)"),
        ("pool", "junk", "pool.jsonl:4: unreadable pool event"),
        ("pool", '{"e": "commit", "step": "x"}', "pool.jsonl:4: commit event with step 'x'"),
        ("pool", "[" * 100000, "pool.jsonl:4: unreadable pool event"),
    ],
)
def test_a_bad_log_line_is_named_by_file_and_line_before_the_model_loads(
    tmp_path, train_here, no_engines, monkeypatch, tiny_train_args, which, junk, needle
):
    run = make_run(tmp_path, tiny_train_args, **{f"junk_{which}": junk})
    monkeypatch.chdir(tmp_path)
    rc, err = train_here("--resume", str(run))
    assert rc == 2 and needle in err and "Traceback" not in err, err[-3000:]
    assert no_engines == []


def test_a_resume_takes_the_newest_intact_checkpoint_with_a_warning(
    tmp_path, train_here, no_engines, monkeypatch, tiny_train_args
):
    run = make_run(tmp_path, tiny_train_args)
    newest = fake_checkpoint(run, 2)
    cut(newest / "policy" / "model.safetensors")
    monkeypatch.chdir(tmp_path)
    rc, err = train_here("--resume", str(run))
    assert no_engines == [1]  # it went on to build the engines, with step 1's checkpoint
    assert f"{newest / 'policy' / 'model.safetensors'}" in err and "step 1" in err, err[-3000:]


def test_check_logs_reads_without_cutting(tmp_path, tiny_train_args):
    run = make_run(tmp_path, tiny_train_args)
    before = (run / "pool.jsonl").read_bytes()
    with open(run / "pool.jsonl", "ab") as f:
        f.write(b'{"e": "add"')  # a torn write: no newline
    check_logs(run, 1)
    assert (run / "pool.jsonl").read_bytes() == before + b'{"e": "add"'
    with pytest.raises(DataError):
        (run / "metrics.jsonl").write_text('{"step": 1}\nnope\n')
        check_logs(run, 1)
