"""The split of `make test` between xdist workers (tests/xdist_units.py) names real files."""

from pathlib import Path

import xdist_units

ROOT = Path(__file__).resolve().parents[1]


def test_every_named_file_or_folder_exists_and_every_long_unit_is_a_unit():
    for prefix in xdist_units.TOGETHER:
        assert (ROOT / prefix).exists(), prefix
    groups = set(xdist_units.TOGETHER.values())
    for name in xdist_units.LONGEST:
        assert name in groups or ((ROOT / name).is_file() and xdist_units.unit(name) == name), name
    assert len(set(xdist_units.LONGEST)) == len(xdist_units.LONGEST)


def test_files_that_share_a_run_or_the_machine_s_processes_form_one_unit():
    unit = xdist_units.unit
    assert unit("tests/distributed/test_ray.py") == unit("tests/distributed/test_deepspeed_learner.py") == "distributed"
    assert (
        unit("tests/recipes/serl/test_golden_metrics.py")
        == unit("tests/eval/test_train_eval.py")
        == unit("tests/run/test_resume_edited.py")
    )
    assert unit("tests/config/test_parser.py") == "tests/config/test_parser.py"
