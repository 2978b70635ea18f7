import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import xdist_units  # tests/xdist_units.py

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "offline")
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
THREADS_BEFORE = {k: os.environ.get(k) for k in THREAD_VARS}  # for runs checked against a record
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`: two workers on two cores, one intra-op thread
    # each (and in every process they start); two threads each would spin-wait on each other
    os.environ.update(dict.fromkeys(THREAD_VARS, "1"))
    # The runs that keep torch's own two threads (the golden run) share the cores with the other
    # worker: spinning OpenMP threads then wait on a descheduled one. Measured on a 2-core AVX2
    # EPYC, one evaluation took 143 s spinning and 23 s passive; the numbers do not change.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own choice; a hook of xdist only
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup`: whole test files (and the groups of tests/xdist_units.py) to one worker each."""
    if config.getoption("dist") == "loadgroup":
        return xdist_units.make_scheduler(config, log)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # the order the work goes out in (tests/xdist_units.py)
        xdist_units.longest_first(items)


def pytest_sessionfinish(session, exitstatus):
    """A passing run leaves nothing in its base temp folder: pyproject's retention policy keeps
    only failed tests' own folders, but module and session fixtures' folders (checkpoints of
    real runs, tens of GB in all) would stay until the next run."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    base = getattr(factory, "_basetemp", None) if factory is not None else None
    if exitstatus == 0 and base is not None and not session.config.option.basetemp:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def smol_path():
    """The embedded SmolLM2-135M-Instruct as a Hugging Face directory (converted once)."""
    from serl.models.resolve import resolve_model

    try:
        return resolve_model("smollm2")
    except Exception as e:  # the package is part of the install; say why if it is not there
        pytest.skip(f"embedded model unavailable: {e}")


@pytest.fixture(scope="session")
def smol_tokenizer(smol_path):
    from serl.models.resolve import load_tokenizer

    return load_tokenizer(smol_path)


# The smallest real SeRL run: three steps of a tiny batch on the transformers generator, no plots.
TINY_TRAIN = [
    "--generator",
    "hf",
    "--steps",
    "3",
    "--rollout_batch_size",
    "2",
    "--n_samples_per_prompt",
    "2",
    "--instructions_num_per_iteration",
    "2",
    "--few_shot_generation",
    "4",
    "--few_shot_generation_batch_size",
    "2",
    "--instruction_max_len",
    "64",
    "--instruction_max_attempts",
    "2",
    "--generate_max_len",
    "24",
    "--max_refill_rounds",
    "1",
    "--reward_difficulty_bounds",
    "0",
    "1",
    "--actor_learning_rate",
    "1e-5",
    "--progress",
    "quiet",
    "--save_model",
    "false",
    "--save_steps",
    "1",
    "--max_ckpt_num",
    "2",
    "--prompt_data",
    str(ROOT / "dataset/arith_seed.jsonl"),
    "--report",
    "false",  # the plots take 9-11 s a run here; tests of the report keep them
    # fp32 on every machine kind: the golden records were made so, and auto would pick bf16 where native
    "--bf16",
    "false",
    "--generator_dtype",
    "float32",
]


@pytest.fixture(scope="session")
def tiny_train_args() -> list[str]:
    return list(TINY_TRAIN)


def _serl_train(*args, fault=None, threads_before=False):
    env = dict(os.environ, SERL_FAULT=fault or "")
    if threads_before:  # torch's own thread count, as when the record was made, even under xdist
        env = {k: v for k, v in env.items() if k not in THREAD_VARS}
        env.update({k: v for k, v in THREADS_BEFORE.items() if v is not None})
    return subprocess.run(
        [sys.executable, "-m", "serl.cli", "train", *map(str, args)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="session")
def serl_train():
    """Runs `serl train ARGS` in a subprocess (``fault=`` sets SERL_FAULT) and returns the result."""
    return _serl_train


@pytest.fixture(scope="session")
def save_tiny():
    """``save_tiny(path, config_cls=LlamaConfig, seed=0, **extra)``: a two-layer model with a
    64-token vocabulary, drawn with ``seed`` and saved at ``path`` (learner tests); returns the path."""

    def save(path, config_cls=None, seed: int = 0, **extra) -> str:
        import torch
        from transformers import AutoModelForCausalLM, LlamaConfig

        torch.manual_seed(seed)
        cfg = (config_cls or LlamaConfig)(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            tie_word_embeddings=True,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            **extra,
        )
        AutoModelForCausalLM.from_config(cfg).save_pretrained(str(path))
        return str(path)

    return save


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory, save_tiny):
    """A two-layer Llama with a 64-token vocabulary, saved once per module (learner tests)."""
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


class _Started:
    """A `serl train` started in the background; ``wait()`` gives its CompletedProcess."""

    def __init__(self, args, out: Path, env: dict):
        self.args, self.out = args, out
        out.mkdir(parents=True, exist_ok=True)
        # output to files, not pipes: a pipe nobody reads stops the run once it is full
        with open(out / "stdout", "w") as so, open(out / "stderr", "w") as se:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "serl.cli", "train", *args], env=env, cwd=ROOT, stdout=so, stderr=se, text=True
            )

    def wait(self, timeout: float = 1800) -> subprocess.CompletedProcess:
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        return subprocess.CompletedProcess(
            self.args, rc, (self.out / "stdout").read_text(), (self.out / "stderr").read_text()
        )


@pytest.fixture(scope="session")
def serl_start(tmp_path_factory):
    """``serl_start(*ARGS, fault=None)`` starts `serl train ARGS` and returns at once; ``.wait()``
    gives the CompletedProcess. Two runs that need nothing from each other go side by side: one
    intra-op thread each (a second one only spin-waits at these sizes; runs compared with each
    other must use the same count), so on two cores the pair takes the time of the longer one."""
    started = []

    def start(*args, fault=None):
        env = dict(os.environ, SERL_FAULT=fault or "", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        run = _Started(list(map(str, args)), tmp_path_factory.mktemp("serl_start"), env)
        started.append(run)
        return run

    yield start
    for run in started:  # a test that failed before waiting: no run outlives the session
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()


def _cut_back(run: Path, to: Path, step: int) -> Path:
    """A copy of the finished run ``run`` at ``to`` as a run stopped after ``step`` leaves it: the later
    checkpoints and the final outputs (model, merged model, report) removed. The later metrics lines
    and other files stay, so the resume must drop or overwrite them."""
    import shutil

    from serl.run.checkpoint import checkpoint_step, complete_checkpoints

    shutil.copytree(run, to)
    steps = [checkpoint_step(c) for c in complete_checkpoints(to)]
    assert step in steps and max(steps) > step, f"{run}: checkpoints of steps {steps}, none of {step} and later"
    for c in (to / "checkpoints").iterdir():  # complete or not: a stopped run has none past its step
        if c.name.startswith("step_") and checkpoint_step(c) > step:
            shutil.rmtree(c)
    for name in ("model", "model_merged", "report"):
        shutil.rmtree(to / name, ignore_errors=True)
    return to


@pytest.fixture(scope="session")
def cut_back():
    """``cut_back(run, to, step)``: instead of a second run stopped after ``step``, a copy of the
    uninterrupted one cut back to its checkpoint of ``step`` (one process fewer per resume test)."""
    return _cut_back


@pytest.fixture
def train_here(capsys):
    """Runs `serl train ARGS` in this process, as `python -m serl.cli train ARGS` would, and returns
    (exit code, stderr). For input refused before any model loads: no interpreter start and
    no imports per case (a subprocess costs 2 to 7 s each)."""
    import logging

    from serl import cli

    def run(*args):
        capsys.readouterr()
        # what the command's logging.basicConfig shows on stderr (a no-op under pytest's handlers)
        root, handler = logging.getLogger(), logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            rc = cli.main(["train", *map(str, args)])
        except SystemExit as e:  # argparse's own refusals
            rc = e.code
        finally:
            root.removeHandler(handler)
            root.setLevel(level)
        return rc, capsys.readouterr().err

    return run


MATH_DIR = ROOT.parent / "shared" / "data" / "serl_math_benchmarks"  # tests/eval/conftest.py's math_dir
# Evaluation on two math benchmarks before training, every 2 steps and at the end; the best step's policy kept.
TINY_EVAL = [
    "--eval_benchmarks",
    "gsm8k,svamp",
    "--eval_data_dir",
    str(MATH_DIR),
    "--eval_limit",
    "2",
    "--eval_k",
    "2",
    "--eval_steps",
    "2",
    "--save_best",
    "eval/gsm8k/mean@2",
]


@pytest.fixture(scope="session")
def tiny_serl_run(tmp_path_factory, smol_path):
    """One TINY_TRAIN run on the CPU, shared: tests/recipes/serl/test_golden_metrics.py checks its
    training rows, tests/eval/test_train_eval.py its evaluation (on when the shared math data is
    there). Evaluation never changes what training samples (serl.run.state.isolated_rng), so the
    training rows are those of a run without it. Returns (dir, the CompletedProcess, evaluated)."""
    run = tmp_path_factory.mktemp("tiny_serl") / "run"
    evaluated = MATH_DIR.is_dir()
    r = _serl_train(
        "--run_dir", run, *TINY_TRAIN, "--device", "cpu", *(TINY_EVAL if evaluated else []), threads_before=True
    )  # the golden record's numerics depend on the thread count
    return SimpleNamespace(dir=run, result=r, evaluated=evaluated)
