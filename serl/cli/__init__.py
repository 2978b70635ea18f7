"""The `serl` command: train | instruct | eval | probe | serve-reward | report | info.

Each command lives with the code it drives (``serl eval`` in ``serl.eval.cli``, ``serl instruct`` in
SeRL's recipe, ...) and is imported only when named; ``serl train``, which drives the whole run
(``serl.run``, or ``serl.distributed`` under ``--ray``), is ``train.py`` here."""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS = {
    "train": ("serl.cli.train", "main", "run a self-play RL training loop"),
    "instruct": ("serl.recipes.serl.instruct.cli", "cli_main", "generate new problems from a seed file"),
    "eval": ("serl.eval.cli", "cli_main", "evaluate a model on math benchmarks, MMLU-Pro or games"),
    "probe": ("serl.eval.probe", "cli_main", "before a label-free run: does the vote beat greedy on the seeds?"),
    "serve-reward": ("serl.rewards.server_cli", "cli_main", "serve rewards over HTTP (OpenRLHF protocol)"),
    "report": ("serl.report.write", "cli_main", "plots and a summary of a run directory"),
    "info": ("serl.engines.info", "cli_main", "this machine, its precision choice and the stack (for bug reports)"),
}


def usage() -> str:
    lines = ["usage: serl COMMAND [options]   (serl COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:14s} {doc}" for name, (_, _, doc) in COMMANDS.items()]
    return "\n".join(lines)


# device files of the accelerators DeepSpeed looks for (NVIDIA, AMD ROCm, Ascend)
ACCELERATOR_DEVICES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/davinci0")


def quiet_deepspeed_probe() -> None:
    """On a machine without an accelerator, DeepSpeed (imported by transformers and serl's checkpoints)
    warns "Setting accelerator to CPU" on every run; telling it the CPU is what it would pick anyway."""
    if "DS_ACCELERATOR" not in os.environ and not any(os.path.exists(d) for d in ACCELERATOR_DEVICES):
        os.environ["DS_ACCELERATOR"] = "cpu"


def quiet_resource_tracker() -> None:
    """multiprocessing's resource tracker, started now with its warnings off. It still unlinks the
    shared memory an engine or reward worker killed at a stop left behind, but without the
    "resource_tracker: There appear to be N leaked shared_memory objects" lines after the run's
    last line (those are vLLM's and the killed workers', not anything the user can act on)."""
    try:
        from multiprocessing import resource_tracker
    except ImportError:  # a platform without it
        return
    sys.warnoptions.append("ignore::UserWarning:multiprocessing.resource_tracker")
    try:
        resource_tracker.ensure_running()
    except Exception:  # never a reason not to run
        pass
    finally:
        sys.warnoptions.pop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"serl: unknown command '{name}'\n{usage()}", file=sys.stderr)
        return 2
    module, func, _ = COMMANDS[name]
    quiet_deepspeed_probe()
    if name in ("train", "eval"):
        quiet_resource_tracker()
    return int(getattr(importlib.import_module(module), func)(rest) or 0)
