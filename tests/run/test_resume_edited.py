"""--resume compares the run-defining options of config.yaml with what the newest checkpoint
was made with: editing `model:` in the file was accepted, where `--model` was refused."""

import json

import pytest

from serl import ConfigError
from serl.config.parser import parse_args
from serl.run.checkpoint import CKPT_DIR, DONE, RUN_CONFIG
from serl.run.resume import WRITTEN, load_saved, resume_config, run_config, write_config


def _run_with_checkpoint(tmp_path, step=2):
    """A run directory as a run leaves it: config.yaml and a complete checkpoint (no weights needed)."""
    cfg, _ = parse_args(["--recipe", "serl", "--run_dir", str(tmp_path), "--steps", "3", "--seed", "42"])
    write_config(cfg, tmp_path)
    ckpt = tmp_path / CKPT_DIR / f"step_{step:06d}"
    ckpt.mkdir(parents=True)
    (ckpt / RUN_CONFIG).write_text(json.dumps(run_config(cfg)))
    (ckpt / DONE).write_text(f"{step}\n")
    return cfg


def _edit(path, key, value):
    lines = path.read_text().splitlines()
    path.write_text("\n".join(f"{key}: {value}" if x.startswith(f"{key}:") else x for x in lines) + "\n")


@pytest.mark.parametrize(
    "key, value, shown",
    [
        ("model", "Qwen/Qwen2.5-0.5B-Instruct", "'Qwen/Qwen2.5-0.5B-Instruct'"),
        ("seed", "7", "7"),
        ("actor_learning_rate", "0.001", "0.001"),
    ],
)
def test_an_edited_run_defining_option_is_refused(tmp_path, key, value, shown):
    cfg = _run_with_checkpoint(tmp_path)
    _edit(tmp_path / "config.yaml", key, value)
    with pytest.raises(ConfigError) as e:
        resume_config(tmp_path, [])
    was = json.loads(json.dumps(getattr(cfg, key)))
    assert str(e.value) == (
        f"--resume: {tmp_path / 'config.yaml'} has {key}: {shown}, but checkpoint step_000002 "
        f"was made with {was!r}; the file was edited after the run started. Put back "
        f"{key}: {was!r}, or start a new run directory"
    )
    assert not (tmp_path / "config_changes.jsonl").exists()


def test_unedited_or_harmless_edits_resume(tmp_path):
    _run_with_checkpoint(tmp_path)
    assert resume_config(tmp_path, []).steps == 3
    _edit(tmp_path / "config.yaml", "steps", "5")  # not run-defining, as with --steps 5
    assert resume_config(tmp_path, []).steps == 5


def _changes(tmp_path):
    return [json.loads(line) for line in (tmp_path / "config_changes.jsonl").read_text().splitlines()]


def test_harmless_hand_edits_are_recorded_in_config_changes(tmp_path):
    """A changed save_steps and an added comment were accepted without a trace (only flags were
    recorded): each is recorded once, with the option's old and new value and the edited lines."""
    cfg = _run_with_checkpoint(tmp_path)
    path = tmp_path / "config.yaml"
    _edit(path, "save_steps", "5")
    path.write_text("# checkpoints sparser after step 2, see notes\n" + path.read_text())
    assert resume_config(tmp_path, []).save_steps == 5
    (rec,) = _changes(tmp_path)
    assert rec["edited"] == str(path)
    assert rec["changes"] == {"save_steps": {"was": cfg.save_steps, "now": 5}}
    assert rec["lines"] == [
        "+ # checkpoints sparser after step 2, see notes",
        f"- save_steps: {cfg.save_steps}",
        "+ save_steps: 5",
    ]
    assert path.read_text().startswith("# checkpoints sparser")  # the user's file is kept as edited
    resume_config(tmp_path, [])  # seen once: a second resume adds nothing
    assert len(_changes(tmp_path)) == 1

    path.write_text(path.read_text().replace("# checkpoints sparser", "# checkpoints kept"))  # a comment alone
    resume_config(tmp_path, ["--steps", "4"])  # and a flag: two records, the file's and the flag's
    edit, flag = _changes(tmp_path)[1:]
    assert edit["changes"] == {} and edit["lines"] == [
        "- # checkpoints sparser after step 2, see notes",
        "+ # checkpoints kept after step 2, see notes",
    ]
    assert flag["changes"] == {"steps": {"was": 3, "now": 4}}
    assert (tmp_path / WRITTEN).read_text() == path.read_text()  # rewritten with the flag, copy and all
    resume_config(tmp_path, [])
    assert len(_changes(tmp_path)) == 3


def test_a_checkpoint_of_an_older_serl_is_not_compared(tmp_path):
    _run_with_checkpoint(tmp_path)
    (tmp_path / CKPT_DIR / "step_000002" / RUN_CONFIG).unlink()
    _edit(tmp_path / "config.yaml", "seed", "7")
    assert resume_config(tmp_path, []).seed == 7


def test_serl_train_resume_of_an_edited_model_exits_2(tmp_path, train_here):
    _run_with_checkpoint(tmp_path)
    _edit(tmp_path / "config.yaml", "model", "/elsewhere/model")
    rc, err = train_here("--resume", str(tmp_path))
    assert rc == 2
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            f"serl train: error: --resume: {tmp_path / 'config.yaml'} has model: '/elsewhere/model', but checkpoint"
        )
    )


def test_a_real_run_records_its_run_config_in_each_checkpoint(tiny_serl_run):
    run = tiny_serl_run.dir
    assert tiny_serl_run.result.returncode == 0, tiny_serl_run.result.stderr[-2000:]
    cfg = load_saved(run / "config.yaml")
    assert (run / WRITTEN).read_text() == (run / "config.yaml").read_text()  # what a resume compares with
    ckpts = sorted((run / CKPT_DIR).glob("step_*"))
    assert ckpts
    for c in ckpts:
        assert json.loads((c / RUN_CONFIG).read_text()) == run_config(cfg)
