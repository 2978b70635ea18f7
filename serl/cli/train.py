"""`serl train`: parse the options of the chosen recipe, then run it (here or under Ray).

    serl train [--recipe NAME] [--config FILE] [options]
    serl train --resume RUN_DIR [options that may change]

The run itself is ``serl.run.runner``'s; ``--ray`` builds the engines as Ray actors
(``serl.distributed.run``) and hands them to the same runner.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from serl import ConfigError
from serl.config.options import TrainConfig
from serl.config.parser import parse_args
from serl.engines.stop import stop_at_once, stop_name
from serl.engines.vllm_quirks import EngineDied
from serl.rewards.remote import RemoteRewardError
from serl.run.loop import Interrupted
from serl.run.resume import resume_config
from serl.run.runner import USER_ERRORS, run


def launch(cfg: TrainConfig, resume_dir: Path | None = None) -> Path:
    """Run ``cfg`` in this process, or with its engines in Ray actors (``--ray``)."""
    if cfg.ray:
        from serl.distributed.run import run_with_ray

        return run_with_ray(cfg, resume_dir=resume_dir)
    return run(cfg, resume_dir=resume_dir)


def _split_resume(argv: list[str]) -> tuple[str | None, list[str]]:
    for i, a in enumerate(argv):
        if a == "--resume":
            return (argv[i + 1] if i + 1 < len(argv) else ""), argv[:i] + argv[i + 2 :]
        if a.startswith("--resume="):
            return a.split("=", 1)[1], argv[:i] + argv[i + 1 :]
    return None, argv


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S"
    )
    logging.getLogger("absl").setLevel(logging.WARNING)  # rouge_score's "Using default tokenizer." on every run
    argv = list(sys.argv[1:] if argv is None else argv)
    cfg = None
    try:
        from serl.config.compat import rewrite

        refused: list[str] = []  # every refusal of the command line, reported at once
        argv = rewrite(argv, refused)  # the seeds' own names (SeRL/OpenRLHF, spiral-rl, verl): docs/compat.md
        value, rest = _split_resume(argv)
        if refused and value is not None:
            raise ConfigError("; ".join(refused))
        with stop_at_once():  # SIGTERM before the loop stops as Ctrl-C does (serl.engines.stop)
            if value is not None:
                run_dir = Path(value)
                if not value or not run_dir.is_dir():
                    raise ConfigError(f"--resume: run directory not found: {value!r}")
                cfg = resume_config(run_dir, rest)
                launch(cfg, run_dir)
            else:
                cfg, _ = parse_args(argv, refused=refused)
                launch(cfg)
    except USER_ERRORS as e:
        print(f"serl train: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:  # Ctrl-C inside the run: where it stands and how to go on
        print(f"serl train: {e}", file=sys.stderr)
        return 130
    except KeyboardInterrupt as e:  # Ctrl-C before the run began writing (reading data, loading the model)
        print(f"serl train: stopped by {stop_name(e)} before training began (nothing new was written)", file=sys.stderr)
        return 130
    except RemoteRewardError as e:  # a reward that did not arrive: the step was not trained
        print(f"serl train: error: {e}", file=sys.stderr)
        return 1
    except EngineDied as e:
        if os.environ.get("SERL_DEBUG"):
            raise
        where = f"the full traceback is in {e.log_path}; " if e.log_path else ""
        print(f"serl train: error: {e}\n({where}SERL_DEBUG=1 prints it here)", file=sys.stderr)
        return 1
    except Exception as e:  # Ray's out-of-memory kill: one line, as an engine's death
        from serl.distributed.oom import is_ray_oom, oom_message

        if os.environ.get("SERL_DEBUG") or not is_ray_oom(e):
            raise
        print(f"serl train: error: {oom_message(e, cfg)}\n(SERL_DEBUG=1 prints the traceback)", file=sys.stderr)
        return 1
    return 0
