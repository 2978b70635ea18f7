"""Bad input to `serl train`: one clear message, exit code 2, no run directory left behind.
The command runs in this process (conftest's train_here): every case is refused before a
model loads, where a subprocess each cost 2 to 6 s of interpreter start and imports."""

import pytest


@pytest.fixture
def run_train(tmp_path, train_here, monkeypatch):
    monkeypatch.chdir(tmp_path)  # as the subprocess ran: from a folder that is not the checkout

    def run(*args):
        run_dir = tmp_path / "run"
        rc, err = train_here("--run_dir", str(run_dir), "--generator", "hf", *args)
        return rc, err, run_dir

    return run


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "seed file not found"),
        ('{"problem": "a b c d"}\n{broken\n', "seeds.jsonl:2: not valid JSON"),
        ('{"question": "a b c d"}\n', "seeds.jsonl:1: missing key 'problem'"),
        ("", "no seed problems"),
    ],
)
def test_bad_seed_file(tmp_path, run_train, content, needle):
    seeds = tmp_path / "seeds.jsonl"
    if content is not None:
        seeds.write_text(content)
    rc, err, run_dir = run_train("--prompt_data", str(seeds))
    assert rc == 2, err
    assert needle in err and str(seeds) in err
    assert "Traceback" not in err
    assert not run_dir.exists()


def test_missing_model_path(tmp_path, run_train):
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    rc, err, run_dir = run_train("--prompt_data", str(seeds), "--model", str(tmp_path / "no-model"))
    assert rc == 2 and "model path does not exist" in err
    assert not run_dir.exists()


def test_existing_run_dir_is_refused(tmp_path, run_train, smol_path):
    """Everything else is valid (a real model, good seeds): only the run dir is wrong."""
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("x")
    rc, err, run_dir = run_train("--prompt_data", str(seeds), "--model", str(smol_path))
    assert rc == 2, err
    assert f"run_dir: {run_dir} already exists and is not empty" in err
    assert f"--resume {run_dir}" in err and "Traceback" not in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["keep.txt"]  # nothing written into it
    assert (run_dir / "keep.txt").read_text() == "x"


def test_eval_sets_load_and_fail_clearly(tmp_path):
    from serl import ConfigError, DataError
    from serl.config.options import TrainConfig
    from serl.eval.sets import load_eval_sets

    held = tmp_path / "held.jsonl"
    held.write_text('{"problem": "What is 2 + 2?", "answer": "4"}\n{"problem": "What is 3 + 3?"}\n')
    with pytest.raises(DataError, match="row 2 has no 'answer'"):
        load_eval_sets(TrainConfig(eval_data=str(held)))
    held.write_text('{"problem": "What is 2 + 2?", "answer": "4"}\n')
    bench = tmp_path / "benches" / "tiny"
    bench.mkdir(parents=True)
    (bench / "test.jsonl").write_text('{"question": "1+1?", "answer": "\\\\boxed{2}"}\n')
    probs = load_eval_sets(
        TrainConfig(eval_data=str(held), eval_benchmarks="tiny", eval_data_dir=str(tmp_path / "benches"))
    )
    assert [(p.benchmark, p.gold) for p in probs] == [("heldout", "4"), ("tiny", "2")]
    with pytest.raises(DataError, match="benchmark directory not found"):
        load_eval_sets(TrainConfig(eval_benchmarks="nope", eval_data_dir=str(tmp_path / "benches")))
    with pytest.raises(ConfigError, match="eval_data_dir"):
        load_eval_sets(TrainConfig(eval_benchmarks="tiny"))


def test_resume_of_a_truncated_config_exits_2_naming_what_is_missing(tmp_path, train_here, monkeypatch):
    """The issue's case: config.yaml cut to its first 300 bytes, then --resume. Refused before
    anything runs or is written, naming the file and the options gone."""
    from serl.config.files import dump
    from serl.config.parser import parse_args

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg, _ = parse_args(["--run_dir", str(run_dir), "--generator", "hf", "--steps", "2"])
    dump(cfg, run_dir / "config.yaml")
    (run_dir / "config.yaml").write_bytes((run_dir / "config.yaml").read_bytes()[:300])
    monkeypatch.chdir(tmp_path)
    rc, err = train_here("--resume", str(run_dir))
    assert rc == 2, err
    assert f"serl train: error: {run_dir / 'config.yaml'}: " in err
    assert "option(s) that define the run are missing" in err
    assert "generator, learner" in err and "Traceback" not in err
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]


def test_truncated_model_exits_2_naming_the_file(tmp_path, run_train, smol_path):
    """A model.safetensors cut short: one line naming it, before any load (was a SafetensorError traceback)."""
    import os
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(smol_path, cut)
    os.truncate(cut / "model.safetensors", 1 << 20)  # a copy interrupted at 1 MiB
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    rc, err, run_dir = run_train("--prompt_data", str(seeds), "--model", str(cut))
    assert rc == 2, err[-2000:]
    assert f"serl train: error: {cut / 'model.safetensors'}: not a complete safetensors file" in err
    assert "Traceback" not in err and not run_dir.exists()


def test_read_only_save_path_exits_2_before_the_model_loads(tmp_path, train_here, monkeypatch):
    """--save_path where nothing can be written: refused first (was an OSError traceback after the load)."""
    import os
    from pathlib import Path

    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.access(ro, os.W_OK):  # root ignores the mode: /sys refuses new entries even to root
        ro = Path("/sys")
    seeds = tmp_path / "seeds.jsonl"
    seeds.write_text('{"problem": "What is 1 + 1?", "answer": "2"}\n')
    target = ro / "run"
    monkeypatch.chdir(tmp_path)
    rc, err = train_here(
        "--save_path",
        str(target),
        "--generator",
        "hf",
        "--prompt_data",
        str(seeds),
        "--model",
        str(tmp_path / "no-model"),
    )  # a model error would come later
    assert rc == 2, err[-2000:]
    assert f"serl train: error: run_dir: cannot write in {ro} (" in err
    assert f"the run directory {target} cannot be made there; choose a writable --run_dir (--save_path)" in err
    assert "Traceback" not in err and not target.exists()
