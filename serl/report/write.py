"""`serl report RUN_DIR`: plots and a summary of a run directory.

Reads RUN_DIR/metrics.jsonl (written by serl.report.metrics), the run's config
(config.yaml or config.json) and evaluation results (eval/*.json, results.json)
when present, and writes RUN_DIR/report/: one PNG per group of metrics that the
run logged, and summary.md. The report is built in a temporary folder and
renamed into place, so a failure never leaves a half-written report.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serl.report.metrics import METRICS_FILE
from serl.report.panels import of_all, of_recipe
from serl.report.plots import PLOTS, plot_leftovers  # PLOTS: tests replace it here
from serl.report.run_metrics import ReportError, Series, read_metrics
from serl.report.summary import change_lines, direction

REPORT_DIR = "report"
# Upper bound on rows in summary tables: a summary should stay readable.
MAX_TABLE_ROWS = 60


# -- reading ----------------------------------------------------------------


@dataclass
class Run:
    run_dir: Path
    series: dict[str, Series]
    steps: list[int]
    wall_times: dict[int, float]
    config: dict | None = None
    config_path: Path | None = None
    evals: list[tuple[str, dict]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except OSError as exc:
        raise ReportError(f"{path}: cannot read ({exc.strerror})") from None


def read_config(run_dir: Path) -> tuple[dict | None, Path | None]:
    yaml_path, json_path = run_dir / "config.yaml", run_dir / "config.json"
    if yaml_path.is_file():
        import yaml

        try:
            data = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f":{mark.line + 1}" if mark is not None else ""
            raise ReportError(f"{yaml_path}{line}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
        path = yaml_path
    elif json_path.is_file():
        data, path = _read_json(json_path), json_path
    else:
        return None, None
    if data is not None and not isinstance(data, dict):
        raise ReportError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data or {}, path


def read_evals(run_dir: Path) -> list[tuple[str, dict]]:
    paths = sorted((run_dir / "eval").glob("*.json")) if (run_dir / "eval").is_dir() else []
    if (run_dir / "results.json").is_file():
        paths.append(run_dir / "results.json")
    out = []
    for path in paths:
        data = _read_json(path)
        if not isinstance(data, dict):
            raise ReportError(f"{path}: expected a JSON object, got {type(data).__name__}")
        out.append((str(path.relative_to(run_dir)), data))
    return out


def load_run(run_dir: str | Path) -> Run:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError(f"{run_dir}: run directory not found")
    series, wall, notes = read_metrics(run_dir / METRICS_FILE)
    if not series:
        raise ReportError(f"{run_dir / METRICS_FILE}: no metrics logged yet")
    steps = sorted({s for ser in series.values() for s in ser.steps})
    config, config_path = read_config(run_dir)
    return Run(run_dir, series, steps, wall, config, config_path, read_evals(run_dir), notes)


# -- summary ----------------------------------------------------------------


# The metrics of the summary table are the run's recipe's (serl.report.panels); which direction
# is better is serl.report.summary's rule.
def _report_of(run: Run):
    """The run's recipe's report, or every recipe's when the run does not name a known one."""
    name = (run.config or {}).get("recipe") if isinstance(run.config, dict) else None
    return of_recipe(name) if isinstance(name, str) else None


def _num(v: float) -> str:
    if not math.isfinite(v):
        return "n/a"
    if v == int(v) and abs(v) < 1e9:
        return str(int(v))
    return f"{v:.4g}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict):
        out = []
        for k, v in data.items():
            out += _flatten(v, f"{prefix}/{k}" if prefix else str(k))
        return out
    if isinstance(data, list):
        return [(prefix, f"[list of {len(data)}]")]
    return [(prefix, data)]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return _num(value)
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


def summary_markdown(run: Run, plots: list[str]) -> str:
    out = [f"# Run report: {run.run_dir.resolve().name}", ""]
    out.append(f"Generated {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')} from `{METRICS_FILE}`.")
    out.append("")
    out.append("## Run")
    out.append(f"- steps logged: {len(run.steps)} (step {run.steps[0]} to {run.steps[-1]})")
    if len(run.wall_times) >= 2:
        t = sorted(run.wall_times.values())
        out.append(f"- wall time between first and last logged step: {_duration(t[-1] - t[0])}")
    out.append(f"- metrics: {len(run.series)} keys")
    for note in run.notes:
        out.append(f"- note: {note}")
    out.append("")

    out.append("## Main metrics")
    rows = []
    main_keys = [(k, direction(k)) for k in (_report_of(run) or of_all()).main if k in run.series]
    main_keys += [(k, direction(k)) for k in sorted(run.series) if k.startswith("eval/")]
    for key, sign in main_keys:
        steps, values = run.series[key].finite()
        if not steps:
            rows.append(f"| {key} | n/a | | | |")
            continue
        last = f"{_num(values[-1])} (step {steps[-1]})"
        if sign:
            best_i = max(range(len(values)), key=lambda i: sign * values[i])
            best = f"{_num(values[best_i])} (step {steps[best_i]})"
            kind = "highest" if sign > 0 else "lowest"
        else:
            best, kind = "", ""
        rows.append(f"| {key} | {last} | {best} | {kind} | {_num(min(values))} / {_num(max(values))} |")
    if rows:
        out += ["| metric | last | best | best is | min / max |", "|---|---|---|---|---|", *rows]
    else:
        out.append("None of the main metrics were logged.")
    out.append("")

    changes = change_lines(run.run_dir)
    if changes:
        out.append("## What changed")
        out += [
            "Direction-aware; held-out changes with their 95% intervals, paired over the same "
            "problems when the run kept per-problem results.",
            "",
            "```",
            *changes,
            "```",
            "",
        ]

    if run.evals:
        out.append("## Evaluation results")
        for name, data in run.evals:
            out.append(f"### {name}")
            items = _flatten(data)
            out += ["| field | value |", "|---|---|"]
            out += [f"| {k} | {_cell(v)} |" for k, v in items[:MAX_TABLE_ROWS]]
            if len(items) > MAX_TABLE_ROWS:
                out.append(f"\n({len(items) - MAX_TABLE_ROWS} more fields in {name})")
            out.append("")

    out.append("## Plots")
    out += [f"- [{p}]({p})" for p in plots] or ["No plots: none of the logged keys has a finite value."]
    out.append("")
    for p in plots:
        out += [f"![{p}]({p})", ""]

    out.append("## Config")
    if run.config is None:
        out.append("No config.yaml or config.json in the run directory.")
    else:
        import yaml

        out += [
            f"From `{getattr(run.config_path, 'name', 'config.yaml')}`:",
            "",
            "```yaml",
            yaml.safe_dump(run.config, sort_keys=False, default_flow_style=False).rstrip(),
            "```",
        ]
    out.append("")
    return "\n".join(out)


# -- writing ----------------------------------------------------------------


def _swap_in(new: Path, final: Path) -> None:
    """Put the finished report at `final`; the old one goes only once the new one is there."""
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=".report-old-", dir=final.parent)) / final.name
        final.rename(old)
    try:
        new.rename(final)
    except BaseException:
        if old is not None:
            old.rename(final)
        raise
    if old is not None:
        shutil.rmtree(old.parent, ignore_errors=True)


def write_report(run_dir: str | Path) -> list[Path]:
    """Write RUN_DIR/report/ (plots + summary.md); returns the files written."""
    run = load_run(run_dir)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReportError("serl report needs matplotlib; install it with pip install 'serl[logging]'") from None

    final = run.run_dir / REPORT_DIR
    tmp = Path(tempfile.mkdtemp(prefix=".report-", dir=run.run_dir))
    try:
        claimed: set[str] = set()
        names = []

        def save(stem: str, fig) -> None:
            if fig is not None:
                fig.savefig(tmp / f"{stem}.png", dpi=110)
                names.append(f"{stem}.png")

        wanted = _report_of(run)  # None: draw every figure the run has keys for
        for stem, build in PLOTS:
            if wanted is None or stem in wanted.plots:
                save(stem, build(run, claimed))
        for stem, build in (wanted or of_all()).figures:  # the recipe's own (every recipe's: unknown)
            save(stem, build(run, claimed))
        for stem, fig in plot_leftovers(run, claimed):
            save(stem, fig)
        (tmp / "summary.md").write_text(summary_markdown(run, names), encoding="utf-8")
        _swap_in(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [final / n for n in names] + [final / "summary.md"]


def _stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # through write_report's cleanup of its temporary directory


def cli_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="serl report",
        description="Write plots and a summary (RUN_DIR/report/) from a run's metrics.jsonl.",
    )
    parser.add_argument("run_dir", help="run directory holding metrics.jsonl (and config.yaml, eval/*.json if any)")
    args = parser.parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)  # a kill mid-draw still removes the temp dir
    try:
        paths = write_report(args.run_dir)
    except KeyboardInterrupt:
        print("serl report: stopped; no report was written (the previous one, if any, is unchanged)", file=sys.stderr)
        return 130
    except ReportError as exc:
        print(f"serl report: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"serl report: error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"wrote {len(paths)} files to {paths[0].parent}")
    for p in paths:
        print(f"  {p.name}")
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
