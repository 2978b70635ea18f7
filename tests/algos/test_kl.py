import math

import pytest
import torch

from serl.algos import kl_estimate

LOGP = torch.tensor([0.0, -1.0, -2.0])
REF = torch.tensor([-0.5, -1.0, -1.0])  # Δ = [0.5, 0, -1]


@pytest.mark.parametrize("kind,expected", [
    ("k1", [0.5, 0.0, -1.0]),
    ("k2", [0.125, 0.0, 0.5]),                                    # Δ²/2
    ("k3", [math.exp(-0.5) - 0.5, 0.0, math.e - 2.0]),            # e^{-Δ} - 1 + Δ
    ("low_var_kl", [math.exp(-0.5) - 0.5, 0.0, math.e - 2.0]),
])
def test_kl_by_hand(kind, expected):
    assert torch.allclose(kl_estimate(LOGP, REF, kind), torch.tensor(expected), atol=1e-6)


@pytest.mark.parametrize("kind,expected", [
    ("k1", [10.0, -10.0]), ("k2", [50.0, 50.0]),
    ("k3", [math.exp(-10) + 9.0, math.exp(10) - 11.0]),
])
def test_kl_clamped(kind, expected):
    out = kl_estimate(torch.tensor([0.0, -40.0]), torch.tensor([-30.0, 0.0]), kind, clamp=10.0)
    assert torch.allclose(out, torch.tensor(expected, dtype=torch.float32), rtol=1e-6)
    assert torch.isfinite(out).all()


def test_kl_unknown_kind():
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(LOGP, REF, "k4")
