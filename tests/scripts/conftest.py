import importlib
import sys
from pathlib import Path

import pytest

EXP = Path(__file__).resolve().parents[2] / "experiments/serl_efficacy"


@pytest.fixture()
def experiment():
    """``experiment(name)`` imports a module of experiments/serl_efficacy (its folder is on
    sys.path for the test only, as when the scripts run)."""
    sys.path.insert(0, str(EXP))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(EXP))
