"""vLLM's own log lines go to RUN_DIR/engine.log unless --show_engine_warnings (serl.engines.engine_log)."""

import json
import logging.config

from serl.config.parser import parse_args
from serl.engines.engine_log import ENV, configure_vllm_logging, route_to
from serl.run.runner import new_run_dir, route_engine_log


def test_the_vllm_logger_writes_to_the_run_s_file(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_CONFIG_PATH", "")  # recorded: what the test sets is undone
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "1")
    monkeypatch.setenv(ENV, "")
    assert configure_vllm_logging() is None  # not asked: vLLM's own defaults
    route_to(tmp_path / "engine.log")
    path = configure_vllm_logging()
    import os

    assert os.environ["VLLM_LOGGING_CONFIG_PATH"] == path
    logging.config.dictConfig(json.loads(open(path).read()))  # what vLLM does with it at import
    logging.getLogger("vllm.platforms").warning("Triton is not installed")
    assert "Triton is not installed" in (tmp_path / "engine.log").read_text()
    logging.getLogger("vllm").handlers.clear()
    monkeypatch.setenv("VLLM_LOGGING_CONFIG_PATH", "/mine.json")  # the user's own config wins
    assert configure_vllm_logging() is None


def test_the_runner_routes_unless_asked_and_a_failed_start_s_logs_do_not_block_a_rerun(tmp_path, monkeypatch):
    monkeypatch.setattr("serl.engines.vllm_generator.vllm_available", lambda: True)
    monkeypatch.setenv(ENV, "")  # recorded, so that the value route_to sets is undone after the test
    run = tmp_path / "run"
    cfg, _ = parse_args(["--generator", "vllm", "--show_engine_warnings", "--run_dir", str(run)])
    route_engine_log(cfg, run)
    assert __import__("os").environ[ENV] == "" and not run.exists()
    cfg, _ = parse_args(["--generator", "vllm", "--run_dir", str(run)])
    route_engine_log(cfg, run)
    assert __import__("os").environ[ENV] == str(run / "engine.log")
    (run / "engine.log").write_text("a failed start\n")
    assert new_run_dir(cfg) == run  # only the logs of a start that failed: the directory is used again
    (run / "metrics.jsonl").write_text("{}\n")
    import pytest

    from serl import ConfigError

    with pytest.raises(ConfigError, match="already exists and is not empty"):
        new_run_dir(cfg)


def test_an_engine_started_meanwhile_keeps_the_log_file_as_its_stderr(tmp_path, monkeypatch):
    import subprocess
    import sys

    from serl.engines.engine_log import engine_stderr

    monkeypatch.setenv(ENV, str(tmp_path / "engine.log"))
    with engine_stderr():
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time; time.sleep(0.3); sys.stderr.write('[W utils.cpp:68] NUMA binding\\n')",
            ]
        )
    print("serl's own line", file=sys.stderr)
    child.wait(timeout=30)
    assert (tmp_path / "engine.log").read_text() == "[W utils.cpp:68] NUMA binding\n"
