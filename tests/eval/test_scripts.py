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
    r = subprocess.run([shell, str(script), "--k", "-3"], cwd=tmp_path, capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path)})
    assert r.returncode == 2 and "--k must be >= 0" in r.stderr


DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"  # as conftest's math_dir and mmlu_dir
CASES = {  # id: (shell, script, env, bench, keys)
    "bash-math_maj": ("bash", "math_maj.sh", {"MATH_SETS": "gsm8k,math_500", "LIMIT": "2", "K": "2"},
                      {"gsm8k": 2, "math_500": 2}, {"pass@1", "maj@2", "pass@2"}),
    "zsh-mmlu_pro": ("zsh", "mmlu_pro.sh", {"STRATIFIED": "2", "K": "2"}, {"mmlu_pro": 2},
                     {"pass@1", "maj@2", "pass@2"}),
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
        env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(Path.home()), "MODEL": smol_path,
               "GENERATOR": "hf", "MAX_NEW_TOKENS": "8", "MAX_MODEL_LEN": "1024",
               "DATA_DIR": str(DATA / "serl_math_benchmarks"), "MMLU_DIR": str(DATA / "mmlu_pro"),
               "OUT_ROOT": str(where / "out"), "OMP_NUM_THREADS": "1", **extra_env}
        path = next(p for p in SCRIPTS if p.name == script)
        args = [shell, str(path), "--quiet", *(["--n_shots", "1"] if script == "mmlu_pro.sh" else [])]
        with open(where / "stdout", "w") as so, open(where / "stderr", "w") as se:  # files: no pipe fills up
            started[name] = (subprocess.Popen(args, cwd=where, stdout=so, stderr=se, text=True, env=env), where)
    runs = {}
    for name, (proc, where) in started.items():
        proc.wait(timeout=1800)
        runs[name] = (subprocess.CompletedProcess(proc.args, proc.returncode, (where / "stdout").read_text(),
                                                  (where / "stderr").read_text()), where / "out")
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
