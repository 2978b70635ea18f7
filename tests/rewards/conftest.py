import pytest

from serl.rewards import EquivalenceChecker


@pytest.fixture(scope="session")
def checker():
    """One real math-verify pool for the whole test session (startup ~3 s)."""
    ch = EquivalenceChecker(timeout=2.0, workers=2)
    yield ch
    ch.close()
