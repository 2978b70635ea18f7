"""vLLM's harmless reload warning is dropped (and nothing else), and a dead engine becomes one
clear error; no vLLM needed here (the real engine is killed in test_vllm_generator.py)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from serl.engines.vllm_quirks import (
    RELOAD_LOGGER,
    EngineDied,
    HarmlessReloadWarning,
    WorkerExtension,
    death_message,
    is_engine_dead_error,
    oom_kills,
)


def record(msg, *args, name=RELOAD_LOGGER):
    return logging.LogRecord(name, logging.WARNING, "layerwise.py", 266, msg, args, None)


@pytest.mark.parametrize(
    "rec, dropped",
    [
        (record("%s: Failed to load weights", "RotaryEmbedding"), True),
        (record("%s: Failed to load weights", "Llama3RotaryEmbedding"), True),
        (record("%s: Failed to load weights", "QKVParallelLinear"), False),  # a real failure stays loud
        (record("%s: Failed to load weights", "RotaryEmbeddingButNot"), False),
        (record("%s: Delayed processing", "RotaryEmbedding"), False),
        (record("RotaryEmbedding: Failed to load weights"), False),  # not vLLM's own format
    ],
)
def test_filter_drops_exactly_the_rotary_message(rec, dropped):
    f = HarmlessReloadWarning()
    assert f.filter(rec) is (not dropped)
    assert f.dropped == int(dropped)


def test_the_filter_is_on_only_during_the_push(caplog):
    log = logging.getLogger(RELOAD_LOGGER)

    class FakeWorker(WorkerExtension):
        def reload_weights(self, weights_path):
            assert weights_path == "/dev/shm/x"
            log.warning("%s: Failed to load weights", "RotaryEmbedding")
            log.warning("%s: Failed to load weights", "RowParallelLinear")

    with caplog.at_level(logging.WARNING, logger=RELOAD_LOGGER):
        assert FakeWorker().serl_reload_weights("/dev/shm/x") == 1
        log.warning("%s: Failed to load weights", "RotaryEmbedding")  # outside a push: kept
    assert [r.getMessage() for r in caplog.records] == [
        "RowParallelLinear: Failed to load weights",
        "RotaryEmbedding: Failed to load weights",
    ]
    assert not log.filters


@pytest.mark.parametrize(
    "dead, before, after, on_cpu, says, not_says",
    [
        (
            ["VLLM::Worker pid 7"],
            3,
            4,
            True,
            ["(VLLM::Worker pid 7)", "Cause: memory", "from 3 to 4", "--vllm_kv_cache_gib", "--generator hf"],
            ["Likely", "--vllm_gpu_memory_utilization"],
        ),
        (["VLLM::Worker pid 7"], 3, 3, True, ["Likely cause: memory", "vLLM's log above"], ["oom_kill count"]),
        (
            [],
            None,
            None,
            False,
            [
                "the vLLM engine process died.",
                "Likely cause: memory",
                "--vllm_gpu_memory_utilization",
                "--generator hf",
            ],
            ["--vllm_kv_cache_gib"],
        ),
    ],
)
def test_death_message(dead, before, after, on_cpu, says, not_says):
    msg = death_message(dead, before, after, on_cpu)
    assert "\n" not in msg
    for s in says:
        assert s in msg
    for s in not_says:
        assert s not in msg


def test_oom_kills_reads_a_count_or_none():
    n = oom_kills()
    assert n is None or (isinstance(n, int) and n >= 0)


def test_engine_dead_error_is_known_by_name():
    EngineDeadError = type("EngineDeadError", (RuntimeError,), {})
    assert is_engine_dead_error(EngineDeadError()) and not is_engine_dead_error(RuntimeError("x"))


def _generator_watching(procs):
    from serl.engines.vllm_generator import VLLMGenerator, _processes

    g = VLLMGenerator.__new__(VLLMGenerator)  # no engine: only the error mapping is exercised
    # the machine's own OOM-kill count so far: no kill during the test reads as "Likely cause"
    g._engine, g._oom_kills, g.on_cpu = _processes({p.pid for p in procs}), oom_kills(), True
    return g


def test_an_error_after_the_engine_died_becomes_engine_died():
    pytest.importorskip("psutil")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        g = _generator_watching([child])
        with pytest.raises(RuntimeError, match="unrelated"):  # engine alive: errors pass through
            with g._engine_call():
                raise RuntimeError("unrelated")
        child.kill()
        child.wait()
        with pytest.raises(EngineDied, match=rf"process died \(\S+ pid {child.pid}\)\. Likely cause: memory"):
            with g._engine_call():
                raise RuntimeError("cancelled")
    finally:
        child.kill()
        child.wait()


def test_train_prints_one_message_and_exits_1(monkeypatch, tmp_path, capsys):
    import serl.cli.train as train
    from serl.run.runner import ERROR_LOG, keep_traceback

    def launch(cfg, resume_dir=None):
        try:
            raise RuntimeError("EngineCore encountered an issue")
        except RuntimeError as cause:
            e = EngineDied(death_message(["VLLM::Worker pid 7"], 0, 0, True))
            try:
                raise e from cause
            except EngineDied:
                keep_traceback(e, tmp_path)
                raise

    monkeypatch.setattr(train, "launch", launch)
    monkeypatch.delenv("SERL_DEBUG", raising=False)
    assert train.main(["--generator", "hf"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("serl train: error: the vLLM engine process died (VLLM::Worker pid 7).")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2
    assert f"the full traceback is in {tmp_path / ERROR_LOG}" in err
    log = (tmp_path / ERROR_LOG).read_text()
    assert "Traceback" in log and "EngineCore encountered an issue" in log
    monkeypatch.setenv("SERL_DEBUG", "1")
    with pytest.raises(EngineDied):
        train.main(["--generator", "hf"])


def test_eval_prints_one_message_and_exits_1(monkeypatch, capsys):
    import serl.eval.cli as cli

    def run(args):
        raise EngineDied(death_message(["VLLM::Worker pid 9"], 0, 0, True))

    monkeypatch.setattr(cli, "run", run)
    monkeypatch.delenv("SERL_DEBUG", raising=False)
    argv = ["--model", "smollm2", "--benchmarks", "gsm8k", "--output_dir", "unused"]
    assert cli.cli_main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("serl eval: error: the vLLM engine process died (VLLM::Worker pid 9).")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2
    monkeypatch.setenv("SERL_DEBUG", "1")
    with pytest.raises(EngineDied):
        cli.cli_main(argv)


def test_an_engine_stopped_by_a_signal_is_not_called_a_memory_failure(tmp_path, monkeypatch):
    from serl.engines import stop

    log = tmp_path / "engine.log"
    log.write_text("old run: [shutdown] EngineCore: trigger received signal=SIGINT\n")
    monkeypatch.setenv("SERL_ENGINE_LOG", str(log))
    monkeypatch.setattr(stop, "received", None)
    offset = log.stat().st_size  # an earlier engine's lines in the same log do not count
    assert "memory" in death_message(["VLLM::Worker pid 7"], 0, 0, True, offset)
    with open(log, "a") as f:
        f.write("INFO vllm.v1.engine.core: [shutdown] EngineCore: trigger received signal=SIGTERM\n")
    msg = death_message(["VLLM::Worker pid 7"], 0, 0, True, offset)
    assert "stopped on SIGTERM" in msg and "memory" not in msg
    monkeypatch.setattr(stop, "received", "Ctrl-C")  # this process got one: the engine went with it
    msg = death_message([], 0, 0, True, offset)
    assert "stopped on Ctrl-C" in msg and "memory" not in msg
