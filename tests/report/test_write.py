"""`serl report`: plots and summary from a synthetic run dir, and its bad-input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serl.report import write as report
from serl.report.metrics import MetricsLogger
from serl.report.write import cli_main, write_report

pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install 'serl[logging]')")

FULL = {
    "reward/mean": [0.2, 0.6, 0.4],
    "reward/agreement": [0.5, 0.7, 0.65],
    "reward/no_answer_frac": [0.3, 0.1, 0.2],
    "reward/clusters": [4, 3, 3],
    "filter/length/passed": [60, 61, 59],
    "filter/length/rejected": [4, 3, 5],
    "filter/rouge/passed": [55, 50, 52],
    "filter/rouge/rejected": [5, 11, 7],
    "filter/difficulty/kept": [30, 35, 33],
    "filter/difficulty/too_easy": [10, 12, 11],
    "filter/difficulty/too_hard": [15, 3, 8],
    "pool/size": [530, 565, 598],
    "pool/generated": [64, 64, 64],
    "pool/kept": [30, 35, 33],
    "kl/mean": [0.001, None, 0.003],
    "actor/entropy": [1.2, 1.1, 1.0],
    "loss/policy": [0.05, -0.02, 0.01],
    "loss/kl": [0.0001, 0.0002, 0.0003],
    "response/length_mean": [310.0, 290.0, 250.0],
    "time/instruct": [5.0, 5.5, 5.2],
    "time/generate": [40.0, 42.0, 41.0],
    "time/reward": [6.0, 6.5, 6.1],
    "time/filter": [1.0, 1.2, 1.1],
    "time/learner": [20.0, 21.0, 20.5],
    "time/sync": [0.5, 0.6, 0.5],
    "time/step": [73.0, 77.5, 75.0],
    "eval/math500/pass@1": [None, None, 0.31],
    "actor/grad_norm": [1.0, 0.9, 1.1],
}
ALL_PLOTS = {
    "reward.png",
    "filters.png",
    "pool.png",
    "kl.png",
    "entropy.png",
    "loss.png",
    "response_length.png",
    "time.png",
    "eval.png",
    "other_actor.png",
}


def make_run(run_dir: Path, series: dict[str, list], config: str | None = None) -> Path:
    steps = len(next(iter(series.values())))
    with MetricsLogger(run_dir) as log:
        for i in range(steps):
            log.log(i + 1, {k: (v[i] if v[i] is not None else float("nan")) for k, v in series.items()})
    if config is not None:
        (run_dir / "config.yaml").write_text(config)
    return run_dir


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """A run with every expected key, reported once (rendering ten plots takes seconds)."""
    run = make_run(
        tmp_path_factory.mktemp("full") / "run", FULL, config="algo: reinforce_pp\nrollout:\n  n_samples: 16\n"
    )
    (run / "eval").mkdir()
    (run / "eval" / "math500.json").write_text(json.dumps({"benchmark": "math500", "pass@1": 0.312, "n": 500}))
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main([str(run)])
    return run, code, out.getvalue()


def test_full_run_writes_every_plot_and_a_summary(full_run):
    full_run, code, stdout = full_run
    assert code == 0
    out_dir = full_run / "report"
    assert {p.name for p in out_dir.iterdir()} == ALL_PLOTS | {"summary.md"}
    assert f"wrote {len(ALL_PLOTS) + 1} files to {out_dir}" in stdout
    for name in ALL_PLOTS:
        data = (out_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        assert len(data) > 10_000, f"{name} looks empty"
    assert not list(full_run.glob(".report-*")), "temporary folders left behind"


def test_summary_has_config_best_last_evals_and_plots(full_run):
    full_run, _, _ = full_run
    md = (full_run / "report" / "summary.md").read_text()
    # reward/mean 0.2, 0.6, 0.4: last 0.4 at step 3, best (highest) 0.6 at step 2.
    assert "| reward/mean | 0.4 (step 3) | 0.6 (step 2) | highest | 0.2 / 0.6 |" in md
    # no_answer_frac 0.3, 0.1, 0.2: lower is better.
    assert "| reward/no_answer_frac | 0.2 (step 3) | 0.1 (step 2) | lowest | 0.1 / 0.3 |" in md
    # kl/mean has a null at step 2 (NaN when logged): it is skipped, not shown as a value.
    assert "| kl/mean | 0.003 (step 3) |  |  | 0.001 / 0.003 |" in md
    assert "| eval/math500/pass@1 | 0.31 (step 3) | 0.31 (step 3) | highest | 0.31 / 0.31 |" in md
    assert "- steps logged: 3 (step 1 to 3)" in md
    assert "### eval/math500.json" in md and "| pass@1 | 0.312 |" in md and "| n | 500 |" in md
    assert "algo: reinforce_pp" in md and "n_samples: 16" in md
    for name in ALL_PLOTS:
        assert f"- [{name}]({name})" in md


@pytest.mark.parametrize(
    "series, plots",
    [
        ({"reward/mean": [0.1, 0.2]}, {"reward.png"}),
        ({"time/generate": [3.0, 4.0], "time/learner": [1.0, 1.5]}, {"time.png"}),
        ({"time/step": [3.0, 4.0]}, {"time.png"}),
        ({"filter/difficulty/kept": [3, 4]}, {"filters.png"}),
        ({"loss/policy": [0.1, 0.2], "loss/entropy_bonus": [0.0, 0.1]}, {"loss.png"}),
        ({"game/win_rate": [0.4, 0.6], "custom/thing": [1, 2]}, {"other_game.png", "other_custom.png"}),
        ({"dpo/margin": [0.0, 0.2], "spin/real_logp": [-1.2, -0.9], "pairs/tied": [1, 0]}, {"dpo.png"}),
        ({"kl/mean": [None, None]}, set()),  # only nulls: nothing to draw
    ],
)
def test_only_plots_whose_keys_exist(tmp_path, series, plots):
    run = make_run(tmp_path / "run", series)
    paths = write_report(run)
    assert {p.name for p in paths} == plots | {"summary.md"}
    assert {p.name for p in (run / "report").iterdir()} == plots | {"summary.md"}
    md = (run / "report" / "summary.md").read_text()
    assert "No config.yaml or config.json" in md


def test_same_step_logged_twice_is_merged(tmp_path):
    run = tmp_path / "run"
    with MetricsLogger(run) as log:
        log.log(1, {"reward/mean": 0.5})
        log.log(1, {"eval/gsm8k/pass@1": 0.25})
        log.log(2, {"reward/mean": 0.7})
    loaded = report.load_run(run)
    assert loaded.steps == [1, 2]
    assert loaded.series["eval/gsm8k/pass@1"].steps == [1]
    assert loaded.series["reward/mean"].values == [0.5, 0.7]


def test_torn_last_line_is_noted_not_fatal(tmp_path):
    run = make_run(tmp_path / "run", {"reward/mean": [0.1, 0.2]})
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/mea')
    assert cli_main([str(run)]) == 0
    md = (run / "report" / "summary.md").read_text()
    assert "metrics.jsonl:3: incomplete last line ignored" in md
    assert "- steps logged: 2 (step 1 to 2)" in md


def test_rerun_replaces_the_old_report(tmp_path):
    run = make_run(tmp_path / "run", {"reward/mean": [0.1, 0.2]})
    write_report(run)
    (run / "report" / "stale.png").write_bytes(b"old")
    write_report(run)
    assert {p.name for p in (run / "report").iterdir()} == {"reward.png", "summary.md"}
    assert not list(run.glob(".report-*"))


def test_json_config_is_read(tmp_path):
    run = make_run(tmp_path / "run", {"reward/mean": [0.1]})
    (run / "config.json").write_text(json.dumps({"algo": "grpo"}))
    write_report(run)
    assert "From `config.json`" in (run / "report" / "summary.md").read_text()


# -- bad input ----------------------------------------------------------------


def metrics_file(tmp_path: Path, text: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(text)
    return run


@pytest.mark.parametrize(
    "text, message",
    [
        (
            '{"step": 1, "reward/mean": 0.5}\n{"step": 2, "reward/mean": 0.6\n{"step": 3}\n',
            "metrics.jsonl:2: not valid JSON",
        ),
        ('{"step": 1, "reward/mean": 0.5}\n\n{"reward/mean": 0.6}\n', "metrics.jsonl:3: field 'step' missing"),
        ('{"step": "one"}\n', "metrics.jsonl:1: field 'step' missing or not an integer"),
        ('{"step": 1, "reward/mean": "high"}\n', "metrics.jsonl:1: field 'reward/mean' is not a number"),
        ("[1, 2]\n", "metrics.jsonl:1: expected a JSON object"),
        ("", "no metrics logged yet"),
    ],
)
def test_malformed_metrics_exit_2_naming_file_and_line(tmp_path, capsys, text, message):
    run = metrics_file(tmp_path, text)
    assert cli_main([str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("serl report: error: ") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (run / "report").exists()
    assert not list(run.glob(".report-*"))


def test_missing_run_dir_and_missing_metrics_exit_2(tmp_path, capsys):
    assert cli_main([str(tmp_path / "nope")]) == 2
    assert f"{tmp_path / 'nope'}: run directory not found" in capsys.readouterr().err
    assert cli_main([str(tmp_path)]) == 2
    assert f"{tmp_path / 'metrics.jsonl'}: metrics file not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("config.yaml", "algo: grpo\nrollout: [1, 2\n", "config.yaml:3: not valid YAML"),
        ("config.yaml", "- just\n- a list\n", "config.yaml: expected a mapping"),
        ("config.json", '{"algo": "grpo",\n "x": }', "config.json:2: not valid JSON"),
        ("results.json", "{oops", "results.json:1: not valid JSON"),
        ("eval/gsm8k.json", "[1, 2]", "gsm8k.json: expected a JSON object"),
    ],
)
def test_bad_side_files_exit_2_and_keep_the_old_report(tmp_path, capsys, name, text, message):
    run = make_run(tmp_path / "run", {"reward/mean": [0.1, 0.2]})
    write_report(run)
    before = (run / "report" / "summary.md").read_text()
    (run / name).parent.mkdir(exist_ok=True)
    (run / name).write_text(text)
    assert cli_main([str(run)]) == 2
    assert message in capsys.readouterr().err
    assert (run / "report" / "summary.md").read_text() == before


def test_failure_while_plotting_leaves_nothing_half_written(tmp_path, monkeypatch):
    run = make_run(tmp_path / "run", {"reward/mean": [0.1, 0.2], "pool/size": [5, 9]})
    write_report(run)
    before = {p.name: p.read_bytes() for p in (run / "report").iterdir()}

    def broken(run, claimed):
        raise RuntimeError("plot failed")

    # reward and pool plots are drawn (into the temp dir) before the failure.
    monkeypatch.setattr(report, "PLOTS", report.PLOTS[:3] + [("broken", broken)])
    with pytest.raises(RuntimeError, match="plot failed"):
        write_report(run)
    assert {p.name: p.read_bytes() for p in (run / "report").iterdir()} == before
    assert not list(run.glob(".report-*"))


def test_a_huge_metric_key_is_drawn_quickly_and_leaves_no_temp_dir(tmp_path):
    import subprocess
    import sys

    run = tmp_path / "run"
    run.mkdir()
    key = "k" * 100_000
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "reward_mean": 0.5, key: 1.0, key[:50_000] + "/x": 2.0}) + "\n" for s in (1, 2, 3)
        )
    )
    try:
        out = subprocess.run(
            [sys.executable, "-m", "serl.cli", "report", str(run)], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:  # SIGKILL by subprocess: what is left shows the hang
        out = None
    assert out is not None and out.returncode == 0, "serl report hung on a 100,000-character key"
    assert (run / "report" / "summary.md").is_file()
    assert not [p for p in run.iterdir() if p.name.startswith(".report")]
    assert all(len(p.name) < 100 for p in (run / "report").iterdir())


def test_sigterm_while_drawing_removes_the_temp_dir(tmp_path, monkeypatch, capsys):
    import os
    import signal
    import time

    from serl.report import write

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward_mean": 0.5}) + "\n" for s in (1, 2)))

    def killed(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("SIGTERM did not stop the report")

    monkeypatch.setattr(write, "summary_markdown", killed)
    assert write.cli_main([str(run)]) == 130
    assert "stopped; no report was written" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]
