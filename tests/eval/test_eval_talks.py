"""serl eval says what it is doing: a line every SERL_PROGRESS_EVERY seconds inside a chunk, speeds of
what it generated (not of what a resume read back), --k's default in --help, tables that name their
model, output folders that two models cannot share; Ctrl-C or SIGTERM: one line, exit 130."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from serl.engines.base import Completion, Sampling
from serl.eval.cli import build_parser, cli_main
from serl.eval.metrics import generate_in_chunks
from serl.eval.resume import PARTIAL, Resumable

ROOT = Path(__file__).resolve().parents[2]


class Slow:
    def __init__(self, secs=0.0):
        self.secs, self.asked = secs, []

    def generate(self, prompts, n, sampling):
        time.sleep(self.secs)
        self.asked += list(prompts)
        return [[Completion(f"{p}:{j}", [1, 2, 3], [9]) for j in range(n)] for p in prompts]


def test_a_long_chunk_says_it_is_still_generating(monkeypatch):
    monkeypatch.setenv("SERL_PROGRESS_EVERY", "0.2")
    log = io.StringIO()
    generate_in_chunks(Slow(0.7), ["a", "b"], 1, Sampling(8, 0.0, 1.0), "math greedy", chunk=2, log=log)
    lines = log.getvalue().splitlines()
    assert any("0/2 prompts, generating the next 2" in x and "s so far" in x for x in lines), lines
    assert lines[-1].startswith("[eval] math greedy: 2/2 prompts, 6 tokens generated")


def test_a_resumed_chunk_is_not_counted_in_the_speed(tmp_path):
    s = Sampling(8, 0.0, 1.0)
    generate_in_chunks(Resumable(Slow(), tmp_path, "m", None), ["a", "b"], 1, s, "x", chunk=2, log=None)
    log = io.StringIO()
    generate_in_chunks(Resumable(Slow(0.05), tmp_path, "m", None), ["a", "b", "c"], 1, s, "x", chunk=2, log=log)
    first, second = log.getvalue().splitlines()
    assert "0 tokens generated, 2 read back from the earlier run" in first and "tok/s" not in first
    assert "3 tokens generated, 2 read back" in second
    speed = float(second.split("(")[1].split()[0])
    assert speed < 3 / 0.04  # three tokens over one real call, not over nothing


def test_help_shows_the_k_default():
    helps = {a.dest: a.help for a in build_parser()._actions}
    assert "default 8" in helps["k"]


def test_an_output_folder_of_another_model_is_refused(tmp_path, capsys):
    out = tmp_path / "model_eval"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"model": "runs/a/model"}))
    rc = cli_main(
        ["--model", "runs/b/model", "--benchmarks", "x", "--data_dir", str(tmp_path), "--output_dir", str(out)]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "holds the results of model runs/a/model, not runs/b/model" in err


def test_the_table_names_its_model(tmp_path, capsys, monkeypatch):

    from serl.eval import cli

    bench = tmp_path / "data" / "tiny"
    bench.mkdir(parents=True)
    (bench / "test.jsonl").write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    args = build_parser().parse_args(
        [
            "--model",
            "some/model",
            "--benchmarks",
            "tiny",
            "--data_dir",
            str(tmp_path / "data"),
            "--output_dir",
            str(tmp_path / "out"),
            "--k",
            "0",
            "--quiet",
        ]
    )
    from serl.models.resolve import load_tokenizer, resolve_model

    tok = load_tokenizer(resolve_model("smollm2"))
    cli.run(args, generator=Slow(), tokenizer=tok)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "model: some/model"
    assert (tmp_path / "out" / "table.txt").read_text().splitlines()[0] == "model: some/model"


def test_sigterm_stops_serl_eval_with_one_line(tmp_path):
    """Before the model loads is enough to see the handler; the same path serves a stop mid-chunk."""
    bench = tmp_path / "data" / "tiny"
    bench.mkdir(parents=True)
    (bench / "test.jsonl").write_text(
        "".join(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1)}) + "\n" for i in range(50))
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "serl.cli",
            "eval",
            "--model",
            "smollm2",
            "--benchmarks",
            "tiny",
            "--data_dir",
            str(tmp_path / "data"),
            "--output_dir",
            str(out),
            "--generator",
            "hf",
            "--device",
            "cpu",
            "--k",
            "0",
            "--max_new_tokens",
            "64",
            "--chunk",
            "1",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, SERL_PROGRESS_EVERY="1"),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:  # wait for the first finished chunk
            if (out / PARTIAL).is_file():
                break
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"serl eval: stopped by SIGTERM; finished chunks are kept in {out}")
