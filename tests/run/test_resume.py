"""A run killed with SIGKILL at several points, injected and from outside, resumes as if
nothing happened: same metrics, pool, policy weights and optimizer state."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serl import ConfigError
from serl.config.files import dump
from serl.config.parser import parse_args
from serl.config.registry import config_class

ROOT = Path(__file__).resolve().parents[2]


def metrics(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        out.append({k: v for k, v in m.items() if not k.startswith("time/") and k != "wall_time"})
    return out


def pool_events(run_dir):
    return [json.loads(ln) for ln in (run_dir / "pool.jsonl").read_text().splitlines() if ln.strip()]


# The difficulty filter on with a real band (4 samples: only a 2-2 split, agreement 0.5,
# is kept) and a refill round, so resume must also restore what the filter and the refill
# loop consumed. Later flags override TINY_TRAIN's.
FILTER_ON = ["--n_samples_per_prompt", "4", "--reward_difficulty_bounds", "0.3", "0.7", "--max_refill_rounds", "2"]


def _start(args, err_file, fault=None):
    # one intra-op thread: the runs share a small machine (spin-waiting threads on busy cores
    # are many times slower), and the reference and resumed runs must use the same count
    env = dict(os.environ, SERL_FAULT=fault or "", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with open(err_file, "w") as err:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "serl.cli", "train", *map(str, args)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )


def _finish(proc, kill_after=None) -> tuple[int, bool]:
    """Wait for the run; with ``kill_after`` seconds, SIGKILL it from outside then (only the
    main process, as the OOM killer does). Returns (exit code, killed by us)."""
    killed = False
    try:
        proc.wait(timeout=kill_after if kill_after is not None else 1800)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=60)
        killed = True
        if kill_after is None:  # a hung run: leave nothing behind, then fail
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    time.sleep(1.0)  # its reward workers see the closed pipe and exit; clear any straggler
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.returncode, killed


def _stop(proc) -> None:
    """SIGKILL a run and whatever it started (a test that fails while the run goes on)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def _finish_timed(proc, timeout: float = 1800) -> tuple[int, float]:
    """Wait for the run; returns (exit code, its CPU seconds, user and system): what it took
    alone, even while another run shared the cores (one thread, so CPU time ~ wall time)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:  # a hung run: leave nothing behind, then fail
            _stop(proc)
            raise subprocess.TimeoutExpired(proc.args, timeout)
        time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, so Popen must not wait again
    time.sleep(1.0)  # its reward workers see the closed pipe and exit; clear any straggler
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.returncode, usage.ru_utime + usage.ru_stime


def _last_ckpt_step(run_dir) -> int:
    from serl.run.checkpoint import latest_checkpoint

    c = latest_checkpoint(run_dir)
    return int(c.name.split("_")[1]) if c else 0


def _differences(a, b, path="") -> list[str]:
    """Paths where two nested checkpoint objects differ (tensors bit for bit)."""
    import numpy as np
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
        return [] if same else [path]
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return [] if np.array_equal(a, b) else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{path} keys {sorted(map(str, set(a) ^ set(b)))}"]
        return [d for k in a for d in _differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{path} length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def _checkpoint_differences(a_ckpt, b_ckpt) -> list[str]:
    import torch
    from safetensors.torch import load_file

    out = []
    files = sorted(p.name for p in (a_ckpt / "policy").glob("*.safetensors"))
    assert files and files == sorted(p.name for p in (b_ckpt / "policy").glob("*.safetensors"))
    for name in files:  # the policy weights, bit for bit
        out += _differences(load_file(a_ckpt / "policy" / name), load_file(b_ckpt / "policy" / name), name)
    for rel in ("policy/learner_state.pt", "trainer_state.pt"):  # optimizer moments, schedule, RNGs, data order
        out += _differences(
            torch.load(a_ckpt / rel, weights_only=False), torch.load(b_ckpt / rel, weights_only=False), rel
        )
    return out


@pytest.mark.slow
def test_sigkill_injected_and_from_outside_then_resume_is_exact_to_the_last_weight(tmp_path, tiny_train_args):
    """SIGKILL at three points the code injects (rollout, checkpoint write, update) and at a
    random moment from outside (seeded), with the difficulty filter and refill on. The
    resumed run ends with the same metrics, pool, policy weights (bit for bit), optimizer
    state and RNG states as one run without interruption."""
    a, b = tmp_path / "a", tmp_path / "b"
    args = [*tiny_train_args, *FILTER_ON]
    log = []

    def attempt(n, kind, what) -> bool:
        """One run of the plan: (kind, what) is an injected fault "name:step", an outside kill after
        ``what`` seconds, or the final run. True when it finished the run."""
        before = _last_ckpt_step(b)
        if kind == "fault" and int(what.split(":")[1]) <= before:
            log.append((kind, what, "skipped: step already checkpointed"))
            return False
        first = not (b / "config.yaml").exists()  # killed before the run dir was set up: start again
        cmd = ["--run_dir", b, *args] if first else ["--resume", b]
        err = tmp_path / f"b{n}.err"
        proc = _start(cmd, err, fault=what if kind == "fault" else None)
        rc, killed = _finish(proc, kill_after=what if kind == "kill" else None)
        log.append((kind, what, f"rc {rc}, killed from outside {killed}, checkpoint {before} -> {_last_ckpt_step(b)}"))
        if kind == "fault":
            assert rc == -9, (log, err.read_text()[-3000:])
            if what == "checkpoint:2":  # the half-written checkpoint never looks complete
                assert not (b / "checkpoints/step_000002/COMPLETE").exists()
            return False
        if killed:
            return False
        assert rc == 0, (log, err.read_text()[-3000:])
        return True

    # The two faults of step 2 need nothing from the reference run, so they run beside it (one
    # thread each: on two cores about a minute and a half less); first, so that neither finds its
    # step already checkpointed.
    ref = _start(["--run_dir", a, *args], tmp_path / "a.err")
    try:
        for n, (kind, what) in enumerate([("fault", "generate:2"), ("fault", "checkpoint:2")]):
            attempt(n, kind, what)
    except BaseException:
        _stop(ref)
        raise
    # its CPU time, not its wall time, which a run beside it stretches: the kill's time scale
    rc, whole = _finish_timed(ref)
    assert rc == 0, (tmp_path / "a.err").read_text()[-3000:]
    ma = metrics(a)
    # the filter and the refill really worked in the reference run
    assert sum(m["filter/difficulty/too_easy"] + m["filter/difficulty/too_hard"] for m in ma) > 0, ma
    assert max(m["filter/rounds"] for m in ma) > 1, ma
    updated = [m["step"] for m in ma if m["train/batch_prompts"] > 0]  # a step may keep no prompt
    assert updated, ma

    rng = random.Random(16)
    # One outside kill, not two (each restart costs CI about half a minute): it meets a run resumed
    # from step 1 with two steps left, more than its delay of at most half a whole run.
    plan = [("kill", rng.uniform(0.1, 0.5) * whole), ("fault", f"learner:{max(updated)}"), ("final", None)]
    done = False
    for n, (kind, what) in enumerate(plan, start=2):
        if attempt(n, kind, what):
            done = True
            break
    assert done, log
    assert sum(1 for k, _, res in log if k == "kill" and "outside True" in res) >= 1, log
    assert sum(1 for k, _, res in log if k == "fault" and not res.startswith("skipped")) >= 2, log
    print("kills:", *log, sep="\n  ")

    mb = metrics(b)
    assert [m["step"] for m in mb] == [1, 2, 3], log  # continuous, nothing duplicated
    assert ma == mb, log  # the same run, to the last digit

    adds = lambda d: [e["item"] for e in pool_events(d) if e["e"] == "add"]
    ids = [i["id"] for i in adds(b)]
    assert len(ids) == len(set(ids))  # no problem duplicated...
    assert [i["text"] for i in adds(a)] == [i["text"] for i in adds(b)]  # ...or lost

    from serl.run.checkpoint import complete_checkpoints

    ckpts = complete_checkpoints(b)
    assert [c.name for c in ckpts] == ["step_000002", "step_000003"]  # keeps the newest 2
    assert _checkpoint_differences(complete_checkpoints(a)[-1], ckpts[-1]) == [], log
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(ckpts[-1] / "policy")  # the final checkpoint loads
    assert not list((b / "checkpoints").glob(".tmp-*"))


def test_checkpoint_comparison_finds_one_changed_bit(tmp_path):
    """The comparison the resume test relies on sees a single flipped bit and a changed moment."""
    import torch
    from safetensors.torch import save_file

    for d in ("x", "y"):
        (tmp_path / d / "policy").mkdir(parents=True)
        save_file({"w": torch.ones(3)}, tmp_path / d / "policy" / "model.safetensors")
        torch.save(
            {"optimizer": {"state": {0: {"exp_avg": torch.zeros(3)}}}, "updates": 3},
            tmp_path / d / "policy" / "learner_state.pt",
        )
        torch.save({"rng": (3, (1, 2), None)}, tmp_path / d / "trainer_state.pt")
    x, y = tmp_path / "x", tmp_path / "y"
    assert _checkpoint_differences(x, y) == []
    w = torch.ones(3)
    w.view(torch.int32)[1] ^= 1  # one bit of one weight
    save_file({"w": w}, y / "policy" / "model.safetensors")
    torch.save(
        {"optimizer": {"state": {0: {"exp_avg": torch.tensor([0.0, 0.0, 1e-30])}}}, "updates": 3},
        y / "policy" / "learner_state.pt",
    )
    assert _checkpoint_differences(x, y) == ["model.safetensors/w", "policy/learner_state.pt/optimizer/state/0/exp_avg"]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--learner", "deepspeed"),  # another engine: other numerics, other optimizer state
        ("--train_batch_size", "4"),  # the batch shape: optimizer steps per training step
        ("--advantage_estimator", "rloo"),
        ("--reward_difficulty_bounds", "0.1 0.9"),
    ],
)
def test_resume_refuses_run_defining_changes(tmp_path, flag, value):
    from serl.run.resume import resume_config

    dump(config_class("serl")(steps=3), tmp_path / "config.yaml")
    with pytest.raises(ConfigError, match=f"option '{flag[2:]}' was .* that makes it a different run"):
        resume_config(tmp_path, [flag, *value.split()])
    assert not (tmp_path / "config_changes.jsonl").exists()


@pytest.mark.parametrize(
    "flag, value",
    [("--filter_draw", "true"), ("--max_draw_retries", "2"), ("--turn_discount", "0.9"), ("--fsp_start_from", "4")],
)
def test_resume_refuses_changing_spirals_game_rules(tmp_path, flag, value):
    """spiral-rl's draw replay, turn discount and population start change what a step trains on."""
    from serl.run.resume import resume_config

    dump(config_class("spiral")(steps=3, opponent="population"), tmp_path / "config.yaml")
    with pytest.raises(ConfigError, match=f"option '{flag[2:]}' was .* that makes it a different run"):
        resume_config(tmp_path, [flag, value])


def test_resume_refuses_a_different_run_and_records_harmless_changes(tmp_path):
    from serl.run.resume import resume_config

    dump(config_class("serl")(steps=3), tmp_path / "config.yaml")
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


# --- a damaged config.yaml: refused, naming what is missing -----------------------------------


def _saved(tmp_path, recipe="serl") -> str:
    """config.yaml as `serl train` writes it (parse, then dump) for a run of ``recipe``."""
    cfg, _ = parse_args(["--recipe", recipe, "--run_dir", str(tmp_path), "--steps", "3"])
    dump(cfg, tmp_path / "config.yaml")
    return (tmp_path / "config.yaml").read_text()


@pytest.mark.parametrize("recipe", ["serl", "spin", "spiral", "spell"])
def test_a_config_written_now_resumes_unchanged(tmp_path, recipe):
    from serl.run.resume import resume_config

    _saved(tmp_path, recipe)
    want, _ = parse_args(["--recipe", recipe, "--run_dir", str(tmp_path), "--steps", "3"])
    assert resume_config(tmp_path, []).to_dict() == want.to_dict()
    assert not (tmp_path / "config_changes.jsonl").exists()


def _cut_points(text: str) -> dict[str, int]:
    """Byte offsets to truncate a saved config at, found in the text itself."""
    at = lambda key: text.index(f"\n{key}:") + 1
    return {
        "empty": 0,
        "inside the first key": 3,
        "first 300 bytes": 300,
        "a line boundary": at("seed"),  # whole lines, the rest missing
        "mid-value": at("model") + len("model: smo"),  # 'model: smo' kept, cut short
        "open quote": at("output_key") + len("output_key: '"),  # an unterminated quoted scalar
        "last newline": len(text) - 1,  # only the final newline lost
        "last value": len(text) - 3,  # the last value cut short
    }


@pytest.mark.parametrize("recipe", ["serl", "spin", "spiral", "spell"])
def test_a_truncated_config_is_refused_naming_what_is_missing(tmp_path, recipe):
    """Cut at several byte offsets, a saved config.yaml is refused: the message names the
    file and the run-defining options that are gone, the bad line, or the cut."""
    from serl.run.resume import resume_config, run_defining

    text = _saved(tmp_path, recipe)
    fixed = run_defining(recipe)
    for name, cut in _cut_points(text).items():
        part = text.encode()[:cut].decode()
        (tmp_path / "config.yaml").write_text(part)
        with pytest.raises(ConfigError) as e:
            resume_config(tmp_path, [])
        msg = str(e.value)
        mid = len(part.splitlines()) if part and not part.endswith("\n") else None
        assert str(tmp_path / "config.yaml") in msg, (name, msg)
        keys = [ln.split(":")[0] for ln in part.splitlines() if ":" in ln and not ln.startswith(("-", " "))]
        if mid is not None and keys:  # the value on the cut line is not trusted: its key counts as gone
            keys = keys[:-1]
        gone = [k for k in fixed if k not in keys]
        if "not valid YAML" in msg:  # the parse error, with its line
            assert mid is not None and f"config.yaml:{mid}: not valid YAML" in msg, (name, msg)
        elif "expected a mapping" in msg:  # a lone word is not a config
            assert name == "inside the first key", msg
        elif "recipe" in gone:  # without it, not even the recipe's own option list is known
            assert "option 'recipe' is missing" in msg, (name, msg)
        elif gone:
            assert f"{len(gone)} option(s) that define the run are missing" in msg, (name, msg)
            listed = re.search(r"are missing(?: \(.*?\))?: (.*?)\. A resume", msg).group(1)
            assert listed.split(", ") == gone, (name, msg)
            # a key on the cut line is present (its value cut short): the message says where
            assert mid is None or f"ends in the middle of line {mid}" in msg, (name, msg)
        else:  # every option there, the last line cut: refused as cut short, or as a bad value
            assert name in ("last newline", "last value"), (name, msg)
            assert f"ends in the middle of line {mid}" in msg or "expected" in msg, (name, msg)
    assert not (tmp_path / "config_changes.jsonl").exists()


def test_a_config_of_an_older_serl_resumes_with_defaults_and_a_warning(tmp_path, caplog):
    """An option that is not run-defining and not in the file (added later) takes its default."""
    from serl.run.resume import resume_config

    text = _saved(tmp_path)
    (tmp_path / "config.yaml").write_text(
        "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith(("eval_k:", "progress:")))
    )
    with caplog.at_level("WARNING", logger="serl"):
        cfg = resume_config(tmp_path, [])
    assert (cfg.eval_k, cfg.progress) == (0, "auto")
    assert "has no eval_k, progress" in caplog.text


def test_a_resume_with_another_recipe_is_refused_plainly(tmp_path):
    from serl.run.resume import resume_config

    _saved(tmp_path, "serl")
    with pytest.raises(ConfigError) as e:
        resume_config(tmp_path, ["--recipe", "spin"])
    assert str(e.value) == (
        f"--resume: run {tmp_path} was a 'serl' run; --recipe spin cannot resume it "
        f"(start a new run directory for a 'spin' run)"
    )
    resume_config(tmp_path, ["--recipe", "serl"])  # naming its own recipe is fine


def test_config_is_written_atomically(tmp_path, monkeypatch):
    """A write that fails (disk full at fsync) leaves the old config.yaml whole, no temp file."""
    import errno

    import serl.config.files

    text = _saved(tmp_path)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(serl.config.files.os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        dump(config_class("serl")(steps=9), tmp_path / "config.yaml")
    assert (tmp_path / "config.yaml").read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_config_cut_inside_its_recipe_value_is_refused(tmp_path):
    from serl.run.resume import resume_config

    (tmp_path / "config.yaml").write_text("recipe: se")
    with pytest.raises(ConfigError, match=r"option 'recipe' is missing \(it ends in the middle of line 1"):
        resume_config(tmp_path, [])
