"""The shell templates in scripts/train/ and the YAML presets in configs/ must be accepted
by `serl train` exactly as written, under bash and zsh."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from serl.config.parser import parse_args

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((ROOT / "scripts" / "train").glob("*.sh"))  # with _fit.sh and SeRL's *_template.sh names
TEMPLATES = [p for p in SCRIPTS if not p.name.startswith("_") and not p.stem.endswith("_template")]
SERL_TEMPLATES = [p for p in TEMPLATES if p.name.startswith("train_llama32_3b_")]
ALGO = {"reinforce_pp": "reinforce", "grpo": "group_norm", "rloo": "rloo"}
MODE = {"serl": ("majority", True), "gt": ("rule", False), "maj": ("majority", False)}
SHELLS = [s for s in ("bash", "zsh") if shutil.which(s)]


def _defaults(text: str) -> dict[str, str]:
    """VAR="${VAR:-default}" lines, expanded in order (defaults may use earlier vars)."""
    env: dict[str, str] = {}
    for name, default in re.findall(r'^(\w+)="\$\{\1:-(.*)\}"', text, flags=re.M):
        env[name] = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], default)
    return env


def _static_argv(path: Path) -> list[str]:
    """The `serl train ...` command of a template, continuation lines joined, vars expanded."""
    text = path.read_text()
    start = text.index("serl train \\")
    lines = []
    for line in text[start:].splitlines():
        lines.append(line.rstrip("\\").strip())
        if not line.rstrip().endswith("\\"):
            break
    env = _defaults(text)
    words = [w for w in shlex.split(" ".join(lines)) if w not in ("${FIT[@]}", "$@")]  # the machine's, the user's
    words = [re.sub(r"\$(\w+)", lambda m: env[m.group(1)], w) for w in words]
    assert words[:2] == ["serl", "train"]
    return words[2:]


def test_all_templates_exist():
    names = {p.stem for p in TEMPLATES}
    assert names == {f"train_llama32_3b_{a}_{m}" for a in ALGO for m in MODE} | {
        "train_spin",
        "train_spiral",
        "train_spell",
    }


@pytest.mark.parametrize("path", SERL_TEMPLATES, ids=lambda p: p.stem)
def test_template_parses_with_its_flags(path):
    argv = _static_argv(path)
    cfg, _ = parse_args(argv)
    algo, mode = path.stem.removeprefix("train_llama32_3b_").rsplit("_", 1)
    assert cfg.advantage_estimator == ALGO[algo]
    assert (cfg.reward_mode, cfg.enable_self_evolution) == MODE[mode]
    assert cfg.use_kl_loss == (algo == "grpo")
    # SeRL's published numbers (README "Hyperparameter Settings" / "Resource Allocation")
    assert (cfg.n_samples_per_prompt, cfg.rollout_batch_size, cfg.train_batch_size) == (16, 16, 16)
    assert (cfg.micro_rollout_batch_size, cfg.micro_train_batch_size) == (4, 2)
    assert cfg.actor_learning_rate == 5e-7 and cfg.init_kl_coef == 1e-4
    assert (cfg.actor_num_gpus_per_node, cfg.vllm_num_engines, cfg.zero_stage) == (8, 8, 3)
    assert cfg.colocate_all_models and cfg.ray and cfg.learner == "deepspeed"
    assert cfg.model == "meta-llama/Llama-3.2-3B-Instruct"
    if mode != "gt":
        assert cfg.reward_difficulty_bounds == [0.2, 0.8]
    if mode == "serl":
        assert (cfg.instructions_num_per_iteration, cfg.few_shot_generation, cfg.few_shot_generation_batch_size) == (
            2000,
            8,
            4,
        )
    for flag in (
        "--pretrain",
        "--prompt_data",
        "--input_key",
        "--label_key",
        "--save_path",
        "--ckpt_path",
        "--use_wandb",
        "--wandb_run_name",
        "--actor_num_nodes",
        "--ref_num_nodes",
        "--ref_num_gpus_per_node",
        "--vllm_tensor_parallel_size",
        "--vllm_gpu_memory_utilization",
        "--vllm_enable_sleep",
        "--learner",
        "--ray",
    ):
        assert flag in argv, f"{path.name} lacks {flag}"


@pytest.mark.parametrize("mode", ["spin", "online"])
def test_spin_template_parses_with_its_flags(mode):
    argv = _static_argv(ROOT / "scripts" / "train" / "train_spin.sh")
    argv[argv.index("--spin_mode") + 1] = mode
    cfg, _ = parse_args(argv)
    assert cfg.recipe == "spin" and cfg.spin_mode == mode
    # SPIN's reference code (configs/config.yaml) and verl's recipe/spin
    assert (cfg.beta, cfg.dpo_loss, cfg.actor_learning_rate, cfg.lr_warmup_ratio) == (0.1, "sigmoid", 5e-7, 0.1)
    assert (cfg.temperature, cfg.top_p, cfg.mix_previous) == (1.0, 1.0, 1.0)
    assert (cfg.n_samples_per_prompt, cfg.ref_update) == ((1, "iteration") if mode == "spin" else (2, "steps:1"))
    assert (cfg.prompt_data, cfg.input_key, cfg.output_key) == ("openai/gsm8k:main", "question", "answer")
    assert cfg.ray and cfg.learner == "deepspeed" and cfg.ref_num_gpus_per_node == 0


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_template_syntax(shell, path):
    r = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


FAKE_SERL = """#!{python}
import json, sys
with open({out!r}, "w") as f:
    json.dump(sys.argv[1:], f)
"""


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("path", SERL_TEMPLATES[:3] + SERL_TEMPLATES[-3:], ids=lambda p: p.stem)
def test_template_runs_the_same_argv_in_the_shell(shell, path, tmp_path):
    """Run the template for real with a stand-in `serl` that records its argv."""
    out = tmp_path / "argv.json"
    fake = tmp_path / "bin" / "serl"
    fake.parent.mkdir()
    fake.write_text(FAKE_SERL.format(python=sys.executable, out=str(out)))
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(
        PATH=f"{fake.parent}{os.pathsep}{env['PATH']}",
        PRETRAIN="/models/My Model",
        SAVE_PATH=str(tmp_path / "run"),
        GPUS="8",
    )  # the machine the template is written for
    r = subprocess.run(
        [shell, str(path), "--steps", "2", "--eval_data", "a b.jsonl"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    argv = json.loads(out.read_text())
    assert argv[0] == "train" and argv[-4:] == ["--steps", "2", "--eval_data", "a b.jsonl"]  # passed through, last
    argv = argv[:-4]
    expected = _static_argv(path)
    expected[expected.index("--pretrain") + 1] = "/models/My Model"  # spaces survive quoting
    expected[expected.index("--save_path") + 1] = str(tmp_path / "run")
    expected[expected.index("--ckpt_path") + 1] = str(tmp_path / "run" / "ckpt")
    assert argv[1:] == expected
    cfg, _ = parse_args(argv[1:])
    assert cfg.model == "/models/My Model" and cfg.ckpt_path == str(tmp_path / "run" / "ckpt")


@pytest.mark.parametrize(
    "name,gpus,colocate,engines",
    [
        ("llama3.2-3b-8xa6000.yaml", 8, True, 8),
        ("qwen2.5-7b.yaml", 4, False, 2),
    ],
)
def test_presets_parse(name, gpus, colocate, engines):
    cfg, _ = parse_args(["--config", str(ROOT / "configs" / name)])
    assert (cfg.actor_num_gpus_per_node, cfg.colocate_all_models, cfg.vllm_num_engines) == (gpus, colocate, engines)
    assert cfg.learner == "deepspeed" and cfg.zero_stage == 3 and cfg.ray
    assert cfg.actor_learning_rate == 5e-7 and cfg.n_samples_per_prompt == 16


def _run_template(path: Path, tmp_path: Path, *extra: str, **env_vars: str):
    """(result, the argv a stand-in `serl` got) of ``bash path extra`` with ``env_vars``."""
    out = tmp_path / "argv.json"
    fake = tmp_path / "bin" / "serl"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(FAKE_SERL.format(python=sys.executable, out=str(out)))
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "GPUS")}
    env.update(PATH=f"{fake.parent}{os.pathsep}{env['PATH']}", SAVE_PATH=str(tmp_path / "run"), **env_vars)
    r = subprocess.run(["bash", str(path), *extra], env=env, capture_output=True, text=True, cwd=tmp_path)
    return r, (json.loads(out.read_text())[1:] if out.exists() else None)


@pytest.mark.parametrize(
    "path", [p for p in TEMPLATES if p.stem.endswith(("_serl", "spin", "spiral", "spell"))], ids=lambda p: p.stem
)
def test_templates_fit_the_machine(path, tmp_path):
    """Fewer GPUs than written: one rank, engine (and reference worker) per GPU. None: one CPU process,
    or a refusal before anything starts when the model cannot fit in memory."""
    r, argv = _run_template(path, tmp_path, GPUS="2", PRETRAIN="smollm2")
    assert r.returncode == 0, r.stderr
    cfg, _ = parse_args(argv)
    assert (cfg.actor_num_gpus_per_node, cfg.vllm_num_engines) == (2, 2) and cfg.ray
    if path.name.startswith("train_llama32_3b_"):  # SeRL's layout puts a reference worker on every GPU
        assert cfg.ref_num_gpus_per_node == 2
    r, argv = _run_template(path, tmp_path, "--steps", "1", GPUS="0", PRETRAIN="smollm2", MEM_GIB="64")
    assert r.returncode == 0, r.stderr
    cfg, _ = parse_args(argv)
    assert not cfg.ray and cfg.learner == "torch" and cfg.device == "cpu" and cfg.steps == 1
    assert "no GPU here: one process on the CPU" in r.stderr
    (tmp_path / "argv.json").unlink()
    r, argv = _run_template(path, tmp_path, GPUS="0", PRETRAIN="Qwen/Qwen2.5-72B-Instruct", MEM_GIB="64")
    assert r.returncode == 2 and argv is None  # serl never started
    assert (
        f"{path}: no GPU here, and training Qwen/Qwen2.5-72B-Instruct on the CPU needs about 1343 GiB of "
        f"memory; 64 GiB is available."
    ) in r.stderr and "PRETRAIN=smollm2" in r.stderr


@pytest.mark.parametrize("path", sorted((ROOT / "scripts" / "train").glob("*_template.sh")), ids=lambda p: p.stem)
def test_serl_s_template_names_run_the_same_command(path, tmp_path):
    """SeRL's README names its scripts *_template.sh: the same run, extra arguments passed on."""
    r, argv = _run_template(path, tmp_path, "--steps", "1", GPUS="8", PRETRAIN="smollm2")
    r2, own = _run_template(
        path.with_name(path.name.replace("_template", "")), tmp_path, "--steps", "1", GPUS="8", PRETRAIN="smollm2"
    )
    assert r.returncode == r2.returncode == 0 and argv == own and argv[-2:] == ["--steps", "1"]
