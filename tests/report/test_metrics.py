"""MetricsLogger sinks (JSONL, TensorBoard, W&B offline) and the progress helpers."""

from __future__ import annotations

import io
import json
import math
import struct
import sys
import time
from pathlib import Path

import pytest

from serl.report.metrics import MetricsLogger, MissingLoggingPackage, wandb_mode
from serl.report.progress import print_step_summary, progress_mode, stage, step_summary


def read_lines(run_dir: Path) -> list[dict]:
    text = (run_dir / "metrics.jsonl").read_text()

    def no_nan(name):  # json.loads would otherwise accept NaN/Infinity
        raise AssertionError(f"invalid JSON constant {name} in metrics.jsonl")

    return [json.loads(line, parse_constant=no_nan) for line in text.splitlines()]


STEPS = {
    1: {"reward/mean": 0.25, "pool/size": 500, "kl/mean": 0.001, "time/step": 12.5},
    2: {"reward/mean": 0.5, "pool/size": 531, "kl/mean": float("nan"), "time/step": 11.0},
    3: {"reward/mean": 0.75, "pool/size": 560, "kl/mean": 0.004, "time/step": float("inf")},
}


# -- JSONL -------------------------------------------------------------------


def test_jsonl_one_line_per_step_with_null_for_non_finite(tmp_path):
    with MetricsLogger(tmp_path) as log:
        for step, metrics in STEPS.items():
            log.log(step, metrics)
            # fsynced each step: the line is on disk before the next step starts.
            assert len(read_lines(tmp_path)) == step
    lines = read_lines(tmp_path)
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert lines[0]["reward/mean"] == 0.25 and lines[0]["pool/size"] == 500
    assert isinstance(lines[0]["pool/size"], int)
    assert lines[1]["kl/mean"] is None
    assert lines[2]["time/step"] is None
    assert lines[2]["kl/mean"] == 0.004
    assert all(isinstance(line["wall_time"], float) for line in lines)
    assert set(lines[0]) == {"step", "wall_time", *STEPS[1]}


def test_numpy_torch_and_bool_values_become_plain_numbers(tmp_path):
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    with MetricsLogger(tmp_path) as log:
        log.log(0, {"a/np": np.float32(0.5), "a/npint": np.int64(7), "a/torch": torch.tensor(2.5), "a/flag": True})
    (line,) = read_lines(tmp_path)
    assert line["a/np"] == 0.5 and line["a/npint"] == 7 and line["a/torch"] == 2.5 and line["a/flag"] == 1


@pytest.mark.parametrize(
    "step, metrics, message",
    [
        (1, {"mean": 1.0}, "namespace/name"),
        (1, {"reward/": 1.0}, "namespace/name"),
        (1, {"reward/mean": "high"}, "non-numeric"),
        (-1, {"reward/mean": 1.0}, "non-negative"),
        (1.5, {"reward/mean": 1.0}, "non-negative int"),
    ],
)
def test_bad_log_calls_raise(tmp_path, step, metrics, message):
    with MetricsLogger(tmp_path) as log:
        with pytest.raises(ValueError, match=message):
            log.log(step, metrics)
    assert read_lines(tmp_path) == []


def test_step_going_backwards_is_refused(tmp_path):
    with MetricsLogger(tmp_path) as log:
        log.log(5, {"reward/mean": 1.0})
        log.log(5, {"eval/gsm8k/pass@1": 0.3})  # same step again is fine (eval logged apart)
        with pytest.raises(ValueError, match="before the last logged step 5"):
            log.log(4, {"reward/mean": 1.0})


def test_log_after_close_raises(tmp_path):
    log = MetricsLogger(tmp_path)
    log.close()
    with pytest.raises(RuntimeError, match="after close"):
        log.log(1, {"reward/mean": 1.0})


def test_fresh_logger_refuses_a_run_dir_with_metrics(tmp_path):
    with MetricsLogger(tmp_path) as log:
        log.log(1, {"reward/mean": 1.0})
    with pytest.raises(FileExistsError, match="resume=True"):
        MetricsLogger(tmp_path)


@pytest.mark.parametrize("keep_through, expected_dropped", [(0, 5), (2, 3), (4, 1), (5, 0), (9, 0)])
def test_truncate_after_then_resume_is_continuous(tmp_path, keep_through, expected_dropped):
    with MetricsLogger(tmp_path) as log:
        for step in range(1, 6):
            log.log(step, {"reward/mean": step / 10})
    with MetricsLogger(tmp_path, resume=True) as log:
        assert log.truncate_after(keep_through) == expected_dropped
        next_step = min(keep_through, 5) + 1
        log.log(next_step, {"reward/mean": -1.0})
    steps = [line["step"] for line in read_lines(tmp_path)]
    assert steps == list(range(1, next_step + 1))
    assert read_lines(tmp_path)[-1]["reward/mean"] == -1.0


def test_resume_drops_a_torn_last_line(tmp_path):
    with MetricsLogger(tmp_path) as log:
        log.log(1, {"reward/mean": 0.1})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "reward/me')  # what a crash mid-write leaves
    with MetricsLogger(tmp_path, resume=True) as log:
        log.truncate_after(1)
        log.log(2, {"reward/mean": 0.2})
    assert [(d["step"], d["reward/mean"]) for d in read_lines(tmp_path)] == [(1, 0.1), (2, 0.2)]


def test_resume_names_a_corrupt_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: bad metrics line"):
        MetricsLogger(tmp_path, resume=True)


# -- optional packages ---------------------------------------------------------


@pytest.mark.parametrize(
    "blocked, kwargs, package",
    [("tensorboard", {"tensorboard_dir": "tb"}, "tensorboard"), ("wandb", {"use_wandb": True}, "wandb")],
)
def test_missing_optional_package_names_the_extra(tmp_path, monkeypatch, blocked, kwargs, package):
    monkeypatch.setitem(sys.modules, blocked, None)  # makes `import blocked` fail
    if "tensorboard_dir" in kwargs:
        kwargs = {"tensorboard_dir": str(tmp_path / "tb")}
    with pytest.raises(MissingLoggingPackage, match=rf"'{package}' package.*serl\[logging\]"):
        MetricsLogger(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run").exists()  # refused before writing anything


@pytest.mark.parametrize(
    "env, netrc_text, expected",
    [
        ({}, None, "offline"),
        ({"WANDB_API_KEY": "k" * 40}, None, "online"),
        ({"WANDB_MODE": "disabled", "WANDB_API_KEY": "k" * 40}, None, "disabled"),
        ({}, "machine api.wandb.ai\n  login user\n  password " + "p" * 40 + "\n", "online"),
        ({}, "machine example.com\n  login user\n  password secret\n", "offline"),
        (
            {"WANDB_BASE_URL": "https://wandb.example.org"},
            "machine wandb.example.org\n  login user\n  password secret\n",
            "online",
        ),
    ],
)
def test_wandb_mode_is_offline_unless_a_key_was_given(tmp_path, env, netrc_text, expected):
    netrc_path = tmp_path / "netrc"
    if netrc_text is not None:
        netrc_path.write_text(netrc_text)
        netrc_path.chmod(0o600)
    assert wandb_mode(env, netrc_path) == expected


# -- TensorBoard and W&B carry the same keys as the JSONL -----------------------


def jsonl_keys(run_dir: Path) -> set[str]:
    return {k for line in read_lines(run_dir) for k in line if k not in ("step", "wall_time")}


def test_tensorboard_has_the_jsonl_keys_and_values(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install 'serl[logging]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = tmp_path / "tb"
    with MetricsLogger(tmp_path, tensorboard_dir=str(tb_dir)) as log:
        for step, metrics in STEPS.items():
            log.log(step, metrics)
    acc = EventAccumulator(str(tb_dir))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == jsonl_keys(tmp_path)
    rewards = [(e.step, e.value) for e in acc.Scalars("reward/mean")]
    assert rewards == [(1, 0.25), (2, 0.5), (3, 0.75)]
    kl = [e.value for e in acc.Scalars("kl/mean")]
    assert math.isnan(kl[1]) and kl[2] == pytest.approx(0.004)


def test_tensorboard_resume_purges_stale_steps(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install 'serl[logging]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb_dir = str(tmp_path / "tb")
    with MetricsLogger(tmp_path, tensorboard_dir=tb_dir) as log:
        for step in (1, 2, 3):
            log.log(step, {"reward/mean": float(step)})
    with MetricsLogger(tmp_path, tensorboard_dir=tb_dir, resume=True) as log:
        log.truncate_after(1)
        log.log(2, {"reward/mean": 20.0})
    acc = EventAccumulator(tb_dir)
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward/mean")] == [(1, 1.0), (2, 20.0)]


def wait_for_history(path: Path, rows: int, timeout: float = 60.0) -> list[dict]:
    """History rows of an offline run file once it holds `rows` of them.

    wandb's service process may still be appending records after finish()
    returns, and a half-written chunk does not parse yet: read until it does.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = read_wandb_history(path)
        except Exception:  # a record cut mid-write
            found = []
        if len(found) >= rows or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def read_wandb_history(path: Path) -> list[dict]:
    """History rows of an offline .wandb file.

    The file is a 7-byte header (":W&B", magic, version) and then LevelDB-log
    style 32 KiB blocks of chunks: crc32 (4 bytes), length (2), type (1: full,
    2: first, 3: middle, 4: last), each chunk's data a piece of a Record protobuf.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    block, pos, pending, rows = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too small for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            if record.WhichOneof("record_type") == "history":
                rows.append(
                    {
                        (item.key or "/".join(item.nested_key)): json.loads(item.value_json)
                        for item in record.history.item
                    }
                )
        elif kind == 0 and length == 0:
            break
    return rows


def test_wandb_offline_run_has_the_jsonl_keys(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb not installed (pip install 'serl[logging]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()
    run_dir = tmp_path / "run"
    with MetricsLogger(run_dir, use_wandb=True, wandb_run_name="test", config={"lr": 1e-6}) as log:
        for step, metrics in STEPS.items():
            log.log(step, metrics)
    (run_file,) = (tmp_path / "wandb_dir").glob("wandb/offline-run-*/run-*.wandb")
    rows = wait_for_history(run_file, 3)
    assert [row["_step"] for row in rows] == [1, 2, 3]
    assert {k for row in rows for k in row if not k.startswith("_")} == jsonl_keys(run_dir)
    assert [row["reward/mean"] for row in rows] == [0.25, 0.5, 0.75]
    run_id = (run_dir / "wandb_run_id.txt").read_text().strip()
    assert run_id in run_file.name

    # A resumed run continues the same W&B run id. Offline run folders are named
    # by the second they start, so wait one to keep the two apart.
    time.sleep(1.1)
    with MetricsLogger(run_dir, use_wandb=True, resume=True) as log:
        log.truncate_after(3)
        log.log(4, {"reward/mean": 1.0})
    files = sorted((tmp_path / "wandb_dir").glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2 and all(run_id in f.name for f in files)
    resumed = next(f for f in files if f != run_file)
    assert [(row["_step"], row["reward/mean"]) for row in wait_for_history(resumed, 1)] == [(4, 1.0)]


def test_wandb_resume_after_a_crash_between_logging_and_checkpoint(tmp_path, monkeypatch):
    """Steps 1-3 reached W&B, the checkpoint only step 1: the resumed run re-runs 2 and 3.
    It continues the same W&B run, does not send 2 and 3 again (W&B would drop them as
    going back in time), and sends 4 on; metrics.jsonl has the resumed run's values."""
    pytest.importorskip("wandb", reason="wandb not installed (pip install 'serl[logging]')")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)  # W&B files go in the run dir
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "run"
    with MetricsLogger(run_dir, use_wandb=True) as log:
        for step in (0, 1, 1, 2, 3):  # step 1 twice: train metrics, then an evaluation
            log.log(step, {"reward/mean": step / 10})
    assert log.wandb_skipped == 0 and (run_dir / "wandb_last_step.txt").read_text() == "3\n"
    (first,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    run_id = (run_dir / "wandb_run_id.txt").read_text().strip()
    assert [row["_step"] for row in wait_for_history(first, 4)] == [0, 1, 2, 3]

    time.sleep(1.1)  # offline run folders are named by the second they start
    with MetricsLogger(run_dir, use_wandb=True, resume=True) as log:
        assert log._wandb_run.id == run_id
        assert log.truncate_after(1) == 2
        for step in (2, 3, 4, 4, 5):
            log.log(step, {"reward/mean": step / 10 + 1})
    assert log.wandb_skipped == 2
    assert (run_dir / "wandb_last_step.txt").read_text() == "5\n"
    resumed = next(f for f in (run_dir / "wandb").glob("offline-run-*/run-*.wandb") if f != first)
    assert run_id in resumed.name
    assert [(r["_step"], r["reward/mean"]) for r in wait_for_history(resumed, 2)] == [(4, 1.4), (5, 1.5)]
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["reward/mean"]) for m in lines] == [
        (0, 0.0),
        (1, 0.1),
        (1, 0.1),
        (2, 1.2),
        (3, 1.3),
        (4, 1.4),
        (4, 1.4),
        (5, 1.5),
    ]


# -- progress ------------------------------------------------------------------


class FakeStream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize(
    "mode, tty, expected",
    [
        (None, True, "bar"),
        ("auto", True, "bar"),
        ("auto", False, "plain"),
        (None, False, "plain"),
        ("plain", True, "plain"),
        ("quiet", True, "quiet"),
        ("bar", False, "bar"),
    ],
)
def test_progress_mode(mode, tty, expected):
    assert progress_mode(mode, FakeStream(tty)) == expected


def test_progress_mode_rejects_unknown():
    with pytest.raises(ValueError, match="'fancy' is not one of auto, bar, plain, quiet"):
        progress_mode("fancy")


def test_plain_stage_prints_one_line_with_throughput(monkeypatch):
    clock = iter([100.0, 104.0, 200.0, 250.0])  # 4 s, then 50 s
    monkeypatch.setattr("serl.report.progress._clock", lambda: next(clock))
    out = FakeStream(False)
    with stage("rollout", total=64, unit="samples", mode="plain", stream=out) as s:
        for _ in range(4):
            s.update(16)
    with stage("update", total=None, unit="batches", mode="plain", stream=out) as s:
        s.update(5)
    assert out.getvalue() == (
        "[rollout] 64/64 samples in 4.00 s (16.0 samples/s)\n[update] 5 batches in 50.0 s (0.1 batches/s)\n"
    )


def test_a_long_stage_says_it_is_still_running(monkeypatch):
    """A generate call reports nothing until it ends: a stage past SERL_PROGRESS_EVERY seconds says so."""
    import time

    monkeypatch.setenv("SERL_PROGRESS_EVERY", "0.05")
    out = FakeStream(False)
    with stage("self-instruct", total=40, unit="problems", mode="plain", stream=out) as s:
        s.update(12)
        time.sleep(0.3)
    lines = out.getvalue().splitlines()
    assert (
        len(lines) >= 3 and lines[0].startswith("[self-instruct] 12/40 problems, ") and lines[0].endswith(" s so far")
    )
    assert lines[-1].startswith("[self-instruct] 12/40 problems in ")
    quiet = FakeStream(False)
    with stage("x", total=1, mode="quiet", stream=quiet):
        time.sleep(0.15)
    assert quiet.getvalue() == ""


def test_plain_stage_marks_failure_and_reraises():
    out = FakeStream(False)
    with pytest.raises(KeyError):
        with stage("reward", total=None, unit="groups", mode="plain", stream=out) as s:
            s.update(3)
            raise KeyError("boom")
    assert out.getvalue().startswith("[reward] 3 groups in ")
    assert out.getvalue().rstrip().endswith("(failed)")


def test_quiet_stage_prints_nothing_and_bar_draws_a_bar():
    quiet = FakeStream(True)
    with stage("update", total=2, unit="batches", mode="quiet", stream=quiet) as s:
        s.update(2)
    assert quiet.getvalue() == "" and s.n == 2
    bar = FakeStream(True)
    with stage("update", total=2, unit="batches", mode="bar", stream=bar) as s:
        s.update(2)
    # tqdm draws "update:   0%| ... 0/2 [..., ?batches/s]" and clears it on close (leave=False).
    assert "update:" in bar.getvalue() and "0/2" in bar.getvalue() and "batches/s" in bar.getvalue()
    assert s.n == 2


SUMMARY = {
    "reward/mean": 0.5,
    "reward/agreement": 0.75,
    "pool/kept": 12,
    "pool/generated": 64,
    "loss/policy": 0.0123,
    "kl/mean": 0.0031,
    "time/step": 41.26,
}


@pytest.mark.parametrize(
    "metrics, expected",
    [
        (SUMMARY, "step 3 | reward 0.500 | agree 0.750 | kept 12/64 | loss 0.012 | kl 3.10e-03 | 41.3 s"),
        ({"reward/mean": float("nan"), "filter/difficulty/kept": 7.0}, "step 3 | reward n/a | kept 7"),
        # a run that writes no problems: the pool's 0/0 gives way to the filter's kept of seen groups
        (
            {
                "pool/kept": 0,
                "pool/generated": 0,
                "filter/difficulty/kept": 5.0,
                "filter/difficulty/too_easy": 2.0,
                "filter/difficulty/too_hard": 1.0,
            },
            "step 3 | kept 5/8",
        ),
        ({}, "step 3"),
        ({"reward/agreement": 0.5, "response/truncated_frac": 0.875}, "step 3 | agree 0.500 | trunc 0.875"),
    ],
)
def test_step_summary(metrics, expected):
    assert step_summary(3, metrics) == expected


@pytest.mark.parametrize("mode, printed", [("plain", True), ("quiet", False), ("bar", True)])
def test_print_step_summary_modes(mode, printed):
    out = FakeStream(False)
    print_step_summary(3, {"reward/mean": 0.5}, mode=mode, stream=out)
    assert out.getvalue() == ("step 3 | reward 0.500\n" if printed else "")


def test_a_long_block_without_a_count_says_so_and_only_the_innermost_speaks(monkeypatch):
    import time

    from serl.report.progress import heartbeat

    monkeypatch.setenv("SERL_PROGRESS_EVERY", "0.05")
    out = FakeStream(False)
    with heartbeat("questioner", "plain", out):
        time.sleep(0.2)
        with stage("rollout", total=8, unit="samples", mode="plain", stream=out):
            time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[questioner] ") and lines[0].endswith(" s so far")
    inner = lines.index(next(x for x in lines if x.startswith("[rollout]")))
    assert all(x.startswith("[rollout]") for x in lines[inner:])  # the outer block is quiet meanwhile
    assert lines[-1].startswith("[rollout] 0/8 samples in ")
