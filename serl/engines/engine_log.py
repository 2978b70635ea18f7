"""vLLM's own log lines go to ``RUN_DIR/engine.log``, not the terminal, unless
``--show_engine_warnings``: a first run then shows serl's lines only (Triton, tcmalloc, NUMA and
deprecation warnings are the engine's, not the run's, and read like errors to a new user).

Besides the ``vllm`` logger, the engine's processes write to stderr themselves (C++ warnings, bars):
they are started with the file as their stderr (``engine_stderr``).

The runner names the file in ``SERL_ENGINE_LOG`` (passed on to Ray's actors); a vLLM engine built
while it is set points ``VLLM_LOGGING_CONFIG_PATH`` at a logging config that writes the ``vllm``
logger to that file (the engine's own processes read it too). A config of the user's own
(``VLLM_LOGGING_CONFIG_PATH`` already set, or ``VLLM_CONFIGURE_LOGGING=0``) is left alone.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from contextlib import contextmanager

ENGINE_LOG = "engine.log"
ENV = "SERL_ENGINE_LOG"


def route_to(path) -> None:
    """Send the engines built from now on (here and in Ray's actors) to the log file ``path``."""
    os.environ[ENV] = str(path)


def configure_vllm_logging() -> str | None:
    """Before vLLM is imported: its logger to ``$SERL_ENGINE_LOG``; the config file written (None: untouched)."""
    target = os.environ.get(ENV)
    if not target or os.environ.get("VLLM_LOGGING_CONFIG_PATH") or os.environ.get("VLLM_CONFIGURE_LOGGING") == "0":
        return None
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {
            "file": {
                "class": "logging.FileHandler",
                "filename": target,
                "formatter": "plain",
                "level": "INFO",
                "encoding": "utf-8",
            }
        },
        "loggers": {"vllm": {"handlers": ["file"], "level": "INFO", "propagate": False}},
    }
    fd, path = tempfile.mkstemp(prefix="serl-vllm-logging-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = path
    return path


@contextmanager
def engine_stderr():
    """While an engine starts, this process's stderr (fd 2) is ``$SERL_ENGINE_LOG``: the engine's
    processes started meanwhile keep it as theirs (C++ warnings such as NUMA binding, weight-loading
    bars), and import-time warnings land there too. Restored afterwards; without the variable, nothing."""
    target = os.environ.get(ENV)
    if not target:
        yield
        return
    try:
        f = open(target, "a", encoding="utf-8")
    except OSError:  # its folder is gone: the engine keeps the terminal, as with --show_engine_warnings
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with f:
        os.dup2(f.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
