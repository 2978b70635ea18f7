"""The asynchronous collect's parts without a model: staleness dropping, the lag, the learner gate."""

import threading
import time

import torch

from serl.engines.base import TrainBatch
from serl.run.async_frame import GatedLearner, stale_filter


def _batch(n, pairs=None):
    return TrainBatch([[1]] * n, [[i + 2] for i in range(n)], [torch.ones(1)] * n, pairs=pairs)


def test_samples_more_than_max_staleness_versions_old_are_dropped():
    # now = 5; versions 5, 4, 3, 2, None -> lags 0, 1, 2, 3 (None: not sampled, kept); the lag
    # logged is that of what is trained: 0 and 1
    batch, m = stale_filter(_batch(5), [5, 4, 3, 2, None], 5, 1)
    assert batch.response_ids == [[2], [3], [6]]
    assert m == {"async/lag_mean": 0.5, "async/lag_max": 1.0, "async/unsampled": 1.0, "async/dropped_stale": 2.0}
    batch, m = stale_filter(_batch(5), [5, 4, 3, 2, None], 5, 2)  # a looser bound keeps the lag-2 one
    assert batch.response_ids == [[2], [3], [4], [6]] and m["async/lag_max"] == 2.0 and m["async/lag_mean"] == 1.0


def test_everything_stale_leaves_no_batch_and_pairs_are_kept():
    batch, m = stale_filter(_batch(2), [0, 0], 3, 2)
    assert batch is None and m == {
        "async/lag_mean": 0.0,
        "async/lag_max": 0.0,
        "async/unsampled": 0.0,
        "async/dropped_stale": 2.0,
    }
    pairs = _batch(2, pairs=[(0, 1)])
    kept, m = stale_filter(pairs, [0, 0], 3, 1)  # DPO pairs: off-policy by design, lag logged only
    assert kept is pairs and m["async/lag_max"] == 3.0 and "async/dropped_stale" not in m


def test_no_max_staleness_keeps_all():
    batch, m = stale_filter(_batch(2), [0, 1], 1, None)
    assert len(batch.response_ids) == 2 and m == {"async/lag_mean": 0.5, "async/lag_max": 1.0, "async/unsampled": 0.0}


class _Learner:
    def __init__(self):
        self.calls = []

    def logprobs(self, x):
        self.calls.append(("logprobs", x))
        return x


def test_the_gate_holds_other_threads_until_the_update_is_done():
    inner = _Learner()
    gated = GatedLearner(inner)
    bound = gated.logprobs  # kept by a recipe before the gate closes: still gated at call time
    gated.gate.clear()
    t = threading.Thread(target=lambda: bound("collect"))
    t.start()
    time.sleep(0.2)
    assert inner.calls == []  # waiting
    assert gated.logprobs("main") == "main"  # the owner thread passes
    inner.calls.append(("update", None))
    gated.gate.set()
    t.join(5)
    assert [c[0] for c in inner.calls] == ["logprobs", "update", "logprobs"]
    assert inner.calls[-1] == ("logprobs", "collect")
