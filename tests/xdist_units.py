"""How `make test` shares the suite between two pytest-xdist workers (`-n 2 --dist loadgroup`).

A unit of work is a test file, so a module fixture (one or more real runs) runs once. The files in
TOGETHER share more than that and form one unit: a session fixture, or the machine's Ray and
DeepSpeed processes. The units in LONGEST start first, so that neither worker is left alone with a
long one at the end; only the order of work depends on that list, never a result.

xdist's own `loadgroup` (the `xdist_group` mark) renames `item._nodeid`, which pytest 9 no longer
reads, so its groups never formed here; `tests/conftest.py` installs this scheduler instead.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOGETHER = {
    "tests/distributed/": "distributed",
    "tests/recipes/serl/test_golden_metrics.py": "tiny_serl_run",
    "tests/eval/test_train_eval.py": "tiny_serl_run",
    "tests/run/test_resume_edited.py": "tiny_serl_run",
}
# from the suite's `--durations`, longest first (a minute or more each on a 2-core machine)
LONGEST = [
    "distributed",
    "tests/run/test_resume.py",
    "tests/config/test_seed_commands.py",
    "tests/recipes/spell/test_spell_run.py",
    "tests/run/test_async_run.py",
    "tests/recipes/spin/test_spin_run.py",
    "tiny_serl_run",
    "tests/recipes/serl/test_serl_lora.py",
    "tests/run/test_lock.py",
    "tests/recipes/test_docs_recipe.py",
    "tests/rewards/test_server_dies.py",
    "tests/run/test_ctrl_c.py",
    "tests/recipes/spin/test_spin_lora.py",
    "tests/eval/test_cli.py",
    "tests/recipes/spiral/test_spiral_run.py",
    "tests/run/test_e2e.py",
    "tests/run/test_guard.py",
    "tests/engines/test_vllm_generator.py",
    "tests/models/test_parts.py",
    "tests/test_wheel.py",
    "tests/eval/test_scripts.py",
]


def unit(path: str) -> str:
    """The unit of work of a test file, given relative to the repository root."""
    return next((group for prefix, group in TOGETHER.items() if path.startswith(prefix)), path)


def longest_first(items) -> None:
    """Sorts collected items in place: the LONGEST units first, the rest in their collected order."""
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: rank.get(unit(item.path.relative_to(ROOT).as_posix()), len(rank)))


def make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        """xdist's scope scheduling (a unit goes whole to one worker), with our units as scopes."""

        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid.split("::", 1)[0])

    config.option.loadscopereorder = False  # xdist would put the units with the most tests first
    return ByUnit(config, log)
