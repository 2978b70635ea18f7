"""The evaluation/ scripts parse in bash and zsh, reach `serl eval`, and run the real model."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "evaluation").glob("*.sh"))


@pytest.mark.parametrize("shell", ["bash", "zsh"])
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_syntax(shell, script):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    subprocess.run([shell, "-n", str(script)], check=True)


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_script_reaches_cli(shell, tmp_path):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    script = next(p for p in SCRIPTS if p.name == "math_greedy.sh")
    # a bad option value: the CLI answers with exit 2 before loading anything
    r = subprocess.run(
        [shell, str(script), "--k", "-3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)},
    )
    assert r.returncode == 2 and "--k must be >= 0" in r.stderr


DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"  # as conftest's math_dir and mmlu_dir
CASES = {  # id: (shell, script, env, bench, keys)
    "bash-math_maj": (
        "bash",
        "math_maj.sh",
        {"MATH_SETS": "gsm8k,math_500", "LIMIT": "2", "K": "2"},
        {"gsm8k": 2, "math_500": 2},
        {"pass@1", "maj@2", "pass@2"},
    ),
    "zsh-mmlu_pro": (
        "zsh",
        "mmlu_pro.sh",
        {"STRATIFIED": "2", "K": "2"},
        {"mmlu_pro": 2},
        {"pass@1", "maj@2", "pass@2"},
    ),
    "zsh-math_greedy": ("zsh", "math_greedy.sh", {"MATH_SETS": "svamp", "LIMIT": "1"}, {"svamp": 1}, {"pass@1"}),
}


@pytest.fixture(scope="module")
def script_runs(tmp_path_factory, smol_path):
    """Each script run as a user would, two at a time (one thread each, so on two cores the three
    take about the time of the longest two): id -> (CompletedProcess, its output root)."""
    if not ((DATA / "serl_math_benchmarks").exists() and (DATA / "mmlu_pro").exists()):
        return {}  # the test skips through math_dir / mmlu_dir
    started = {}
    for name, (shell, script, extra_env, _, _) in CASES.items():
        if shutil.which(shell) is None:
            continue
        if len([p for p, *_ in started.values() if p.poll() is None]) >= 2:
            next(p for p, *_ in started.values() if p.poll() is None).wait()
        where = tmp_path_factory.mktemp(name)
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHON": sys.executable,
            "HOME": str(Path.home()),
            "MODEL": smol_path,
            "GENERATOR": "hf",
            "MAX_NEW_TOKENS": "8",
            "MAX_MODEL_LEN": "1024",
            "DATA_DIR": str(DATA / "serl_math_benchmarks"),
            "MMLU_DIR": str(DATA / "mmlu_pro"),
            "OUT_ROOT": str(where / "out"),
            "OMP_NUM_THREADS": "1",
            **extra_env,
        }
        path = next(p for p in SCRIPTS if p.name == script)
        args = [shell, str(path), "--quiet", *(["--n_shots", "1"] if script == "mmlu_pro.sh" else [])]
        with open(where / "stdout", "w") as so, open(where / "stderr", "w") as se:  # files: no pipe fills up
            started[name] = (subprocess.Popen(args, cwd=where, stdout=so, stderr=se, text=True, env=env), where)
    runs = {}
    for name, (proc, where) in started.items():
        proc.wait(timeout=1800)
        runs[name] = (
            subprocess.CompletedProcess(
                proc.args, proc.returncode, (where / "stdout").read_text(), (where / "stderr").read_text()
            ),
            where / "out",
        )
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_script_runs_real_model(case, script_runs, math_dir, mmlu_dir):
    """Each script, run as a user would, evaluates the real model on a small slice."""
    shell, _, _, bench, keys = CASES[case]
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} not installed")
    r, out = script_runs[case]
    assert r.returncode == 0, r.stderr[-2000:]
    (res_file,) = out.glob("*/results.json")
    res = json.loads(res_file.read_text())
    assert res["generator"] == "hf"
    assert {name: e["n"] for name, e in res["benchmarks"].items()} == bench
    for e in res["benchmarks"].values():
        assert keys <= set(e) and all(0.0 <= e[k] <= 1.0 for k in keys)
    rows = (res_file.parent / "generations.jsonl").read_text().splitlines()
    per_problem = (1 if "pass@1" in keys else 0) + (2 if "maj@2" in keys else 0)
    assert len(rows) == sum(bench.values()) * per_problem
    assert "pass@1" in r.stdout  # the printed table


SEERL_NAMES = Path(__file__).resolve().parents[2] / "evaluation"
FAKE_PYTHON = '#!/bin/sh\necho "$*" >> {out}\n'


@pytest.mark.parametrize(
    "script, env, expected",
    [
        (
            "Math-Benchmarks/scripts/vllm_gen_outputs_greedy_template.sh",
            {"MODEL_PATH_LIST": "m/a m/b", "DATA_NAME": "math_500,gsm8k", "DATA_DIR": "/d"},
            ["--model m/a", "--benchmarks math_500,gsm8k --data_dir /d", "--k 0", "/m_a/math_greedy"],
        ),
        (
            "Math-Benchmarks/scripts/vllm_gen_outputs_n_sampling_template.sh",
            {"MODEL_PATH_LIST": "m/a,m/b", "DATA_NAME": "svamp", "N_SAMPLING": "16"},
            ["--model m/a", "--benchmarks svamp", "--k 16", "/m_a/math_maj16"],
        ),
        (
            "MMLU-Pro/scripts/eval_models_template.sh",
            {"models": "m/a m/b"},
            ["--model m/a", "--benchmarks mmlu_pro", "/m_a/mmlu_pro"],
        ),
    ],
)
def test_serl_s_evaluation_script_names_run_serl_eval_per_model(script, env, expected, tmp_path):
    """SeRL's README names evaluation/Math-Benchmarks/scripts/*_template.sh and MMLU-Pro's: each runs
    serl's script once per model, SeRL's variables read as serl's."""
    out = tmp_path / "calls"
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.format(out=out))
    fake.chmod(0o755)
    r = subprocess.run(
        ["bash", str(SEERL_NAMES / script), "--limit", "3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHON": str(fake),
            "HOME": str(tmp_path),
            "OUT_ROOT": str(tmp_path / "o"),
            **env,
        },
    )
    assert r.returncode == 0, r.stderr
    a, b = out.read_text().splitlines()
    assert all(x in a for x in expected) and a.endswith("--limit 3"), a
    assert "--model m/b" in b and f"{tmp_path / 'o'}/m_b/" in b


def test_serl_s_scoring_script_names_show_serl_s_tables(tmp_path):
    (tmp_path / "o" / "a" / "math_greedy").mkdir(parents=True)
    (tmp_path / "o" / "a" / "math_greedy" / "table.txt").write_text("math_500 pass@1 8.0\n")
    for name in ("evaluate_outputs_template.sh", "find_outputs_maj_template.sh", "evaluate_outputs_maj_template.sh"):
        r = subprocess.run(
            ["bash", str(SEERL_NAMES / "Math-Benchmarks/scripts" / name)],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "OUTPUT_DIRS": str(tmp_path / "o")},
        )
        assert r.returncode == 0 and "math_500 pass@1 8.0" in r.stdout, r.stderr
        assert f"{name}: serl eval scores while it generates" in r.stderr
