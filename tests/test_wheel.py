"""serl installed from its wheel, without a checkout, runs.

The wheel is built from a copy of the sources and installed non-editable into a fresh
venv. The venv borrows this environment's dependencies (torch etc.) through a ``.pth``
line naming our site-packages: a path line is put on ``sys.path``, but ``.pth`` files in
that directory are not processed, so the editable serl's finder is not loaded there, and
the test checks that ``serl`` is imported from the venv. Every command runs in a
directory outside the checkout, with the default and documented data paths.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "serl", "dataset", "prompts", "configs")
# One step of SeRL on the seeds (no self-instruction: a random model writes no problems),
# small enough that the run is mostly start-up.
TINY = [
    "--generator",
    "hf",
    "--steps",
    "1",
    "--rollout_batch_size",
    "1",
    "--n_samples_per_prompt",
    "2",
    "--enable_self_evolution",
    "false",
    "--generate_max_len",
    "8",
    "--max_refill_rounds",
    "1",
    "--reward_difficulty_bounds",
    "0",
    "1",
    "--micro_train_batch_size",
    "2",
    "--progress",
    "quiet",
    "--save_model",
    "false",
    "--save_steps",
    "0",
]


def _run(cmd, cwd, env, timeout=600):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _start(cmd, cwd, env, name):
    """``_run`` started in the background (output to files beside ``cwd``, not pipes); ``_wait`` ends it."""
    cmd = [str(c) for c in cmd]
    out, err = cwd.parent / f"{name}.stdout", cwd.parent / f"{name}.stderr"
    with open(out, "w") as so, open(err, "w") as se:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=so, stderr=se, text=True), out, err


def _wait(started, timeout=600):
    proc, out, err = started
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    r = subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
    assert r.returncode == 0, f"{proc.args}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(python, serl script, environment, outside dir) of a fresh venv holding only the wheel."""
    missing = [m for m in ("pip", "setuptools") if importlib.util.find_spec(m) is None]
    if missing:  # CI's venv has both; an environment without them cannot build a wheel
        pytest.skip(f"cannot build a wheel here: no {' or '.join(missing)} in {sys.prefix}")
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy: a stale build/ folder in the checkout cannot leak into the wheel,
    # and the build leaves nothing in the checkout.
    src = tmp / "src"
    for name in SOURCES:
        f = ROOT / name
        if f.is_dir():
            shutil.copytree(f, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(f, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "-q", "--no-deps", "--no-index", "--no-build-isolation", "-w", tmp / "dist", src], tmp, env)
    (wheel,) = (tmp / "dist").glob("serl-*.whl")
    # No pip of its own: the borrowed site-packages provides pip's module.
    _run([sys.executable, "-m", "venv", "--without-pip", tmp / "venv"], tmp, env)
    py = tmp / "venv" / "bin" / "python"
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp, env).stdout.strip())
    ours = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site / "_serl_test_deps.pth").write_text("".join(f"{p}\n" for p in ours))
    # --ignore-installed: the editable serl is visible through the borrowed path; pip must
    # neither count it as installed nor try to remove it.
    _run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed", wheel], tmp, env)
    outside = tmp / "outside"
    outside.mkdir()
    return py, tmp / "venv" / "bin" / "serl", env, outside


def test_wheel_holds_the_shipped_files_and_imports_from_the_venv(venv):
    py, _, env, outside = venv
    code = (
        "import json, serl, serl.shipped as s; print(json.dumps([serl.__file__] + "
        "[str(s.shipped_dir(k)) for k in s.KINDS]))"
    )
    paths = json.loads(_run([py, "-c", code], outside, env).stdout)
    venv_dir = py.parents[1].resolve()
    # serl and its files come from the fresh venv: not the checkout's serl, nor its folders
    assert all(Path(p).resolve().is_relative_to(venv_dir) for p in paths), paths
    dirs = dict(zip(("dataset", "prompts", "configs"), map(Path, paths[1:])))
    for kind, folder in dirs.items():  # every shipped file, nothing missing
        names = lambda d: sorted(f.name for f in d.iterdir() if f.is_file())  # noqa: E731
        assert names(folder) == names(ROOT / kind), kind


@pytest.mark.slow
def test_defaults_and_quickstart_resolve_outside_the_checkout(venv):
    """Parsing and preparing only (no model run): the quickstart config and every recipe's
    default data files are found by an installed serl, from a directory that has none."""
    py, _, env, outside = venv
    code = """
import json
from serl.config.parser import parse_args
from serl.run.runner import prepare
out = {}
cfg, _ = parse_args(["--config", "configs/quickstart.yaml"])
p = prepare(cfg)
out["quickstart"] = [cfg.prompt_data, len(p.data), len(p.eval_set)]
cfg, _ = parse_args(["--recipe", "spin"])
out["spin"] = [cfg.prompt_data, len(prepare(cfg).data)]
cfg, _ = parse_args(["--recipe", "spell", "--eval_qa_limit", "0", "--eval_verify_limit", "0"])
p = prepare(cfg)
corpus, held = p.data, p.eval_set
out["spell"] = [cfg.corpus, len(corpus.clusters), len(held.qa), len(held.verify)]
print(json.dumps(out))
"""
    got = json.loads(_run([py, "-c", code], outside, env).stdout.strip().splitlines()[-1])
    rows = lambda name: sum(1 for _ in (ROOT / "dataset" / name).open())  # noqa: E731
    assert got["quickstart"] == ["dataset/arith_seed.jsonl", rows("arith_seed.jsonl"), 32]
    assert got["spin"] == ["dataset/arith_spin_train.jsonl", rows("arith_spin_train.jsonl")]
    assert got["spell"][0] == "dataset/docs_train.jsonl" and got["spell"][1] > 0
    assert got["spell"][2:] == [rows("docs_heldout_qa.jsonl"), rows("docs_heldout_verify.jsonl")]
    assert not (outside / "unused").exists() and not any(outside.iterdir())


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smol_tokenizer):
    """A two-layer random Llama with SmolLM2's tokenizer: the train run tests the install,
    not the model, so it need not spend time on 135M parameters."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tok = smol_tokenizer
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    path = tmp_path_factory.mktemp("tiny_smol") / "model"
    LlamaForCausalLM(cfg).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


@pytest.mark.slow
def test_instruct_and_a_tiny_train_run_outside_the_checkout(venv, tiny_model):
    py, serl, env, outside = venv
    # the two commands side by side, one intra-op thread each (on two cores: the time of the longer)
    env = dict(env, OMP_NUM_THREADS="1")
    # serl instruct: the default model, the documented seed path and the packaged template
    instruct = _start(
        [
            serl,
            "instruct",
            "--seeds",
            "dataset/arith_seed.jsonl",
            "--out",
            "new.jsonl",
            "-n",
            "1",
            "--n_shots",
            "2",
            "--prompts_per_call",
            "1",
            "--max_attempts",
            "2",
            "--max_new_tokens",
            "64",
        ],
        outside,
        env,
        "instruct",
    )
    # serl train with the default seed file (dataset/arith_seed.jsonl), one tiny step
    train = _start([serl, "train", "--model", tiny_model, "--run_dir", "run", *TINY], outside, env, "train")
    _wait(instruct)
    r = _wait(train)
    rows = [json.loads(line) for line in (outside / "new.jsonl").read_text().splitlines()]
    assert rows and all({"text", "passed", "parents"} <= set(r) for r in rows), rows
    run = outside / "run"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["prompt_data"] == "dataset/arith_seed.jsonl" and cfg["steps"] == 1
    pool = [json.loads(line) for line in (run / "pool.jsonl").read_text().splitlines()]
    seeds = [json.loads(line)["problem"] for line in (ROOT / "dataset" / "arith_seed.jsonl").open()]
    assert [e["item"]["text"] for e in pool if e.get("e") == "add"] == seeds  # the shipped seeds
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1]["step"] == 1 and steps[-1]["actor/updates"] == 1, steps[-1]
    assert (run / "checkpoints" / "step_000001" / "COMPLETE").is_file()
    assert (run / "report" / "summary.md").is_file()
    assert "Traceback" not in r.stderr
