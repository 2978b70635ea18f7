import pytest

from serl.eval.metrics import breakdown, pass_at_k


@pytest.mark.parametrize(
    "n,c,k,expected",
    [
        (4, 1, 1, 0.25),  # c/n
        (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2)
        (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3)
        (8, 0, 8, 0.0),
        (8, 1, 8, 1.0),  # k == n: any correct
        (8, 8, 1, 1.0),
    ],
)
def test_pass_at_k_by_hand(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_needs_enough_samples():
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_breakdown_means_per_key():
    out = breakdown(["1", "2", "1", None], {"acc": [1.0, 0.0, 0.0, 1.0]})
    assert out == {"1": {"n": 2, "acc": 0.5}, "2": {"n": 1, "acc": 0.0}}
