"""SeRL on the runner gives the same metrics as before the recipe seam existed.

``golden_metrics.jsonl`` was written by a tiny fixed-seed `serl train` run (the shared
``TINY_TRAIN`` flags, transformers generator) with the code before SeRL moved into
``serl/recipes/serl``, and re-recorded once, on purpose, for issue 17's step semantics
(refill rounds of a batch's worth, carry, the ``batch/``, ``filter/prompt_len/``,
``reward/verify_*`` and ``train/masked_truncated`` keys; ``pool/expired`` gone): every
value the old file had stayed the same except step 3's ``actor/lr``, since
``--instructions_num_per_iteration`` now sizes the LR schedule, as in SeRL. Re-recorded a
second time for issue 17's learner (packed micro-batches, blockwise log-probs): the rollouts
and rewards stayed identical; only learner numerics moved, by rounding (entropy 8e-5
relative, kl/mean 1e-4, grad_norm 1e-6; packed and padded log-probs differ by ~1e-5). The same run
now must log the same numbers, times aside. The
generator samples on this machine's CPU kernels: on another kind of machine the samples,
and so the numbers, can differ; re-record with SERL_RECORD_GOLDEN=1 only when a change of
behaviour is intended, and say so in the commit.
"""

import json
import math
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
# The generator samples on the CPU's own kernels, so each kind of CPU has its own record: machines
# with AMX (bf16 matrix tiles) decode differently from those without (kl/mean differs by 2e-4
# relative at step 2 between the two, with identical code).
# AVX2-only CPUs (no AVX-512) run other fp32 kernels again: their learner numbers differ from the AVX-512
# record by ~1e-6 relative, so they get a record of their own (golden_metrics.avx2.jsonl: made with 42c7a96,
# the commit before issue 59, on an AVX2-only AMD EPYC on 2026-12-07).
_FLAGS = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
AMX = " amx_bf16" in _FLAGS
AVX2_ONLY = " avx512f" not in _FLAGS and not AMX
GOLDEN = Path(__file__).with_name(
    "golden_metrics.amx.jsonl" if AMX else "golden_metrics.avx2.jsonl" if AVX2_ONLY else "golden_metrics.jsonl"
)
# Counts of the work each stage does (for bench/roofline.py), added after both records were made;
# no behaviour changed, so they are checked for presence (and against each other) here, and
# compared like every other key once a record has them.
ADDED = {
    "instruct/prompt_tokens",
    "rollout/prompt_tokens",
    "rollout/gen_tokens",
    "train/logprob_tokens",
    "train/logprob_answer_tokens",
    "train/logprob_passes",
    "train/tokens",
}


def _rows(path: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if not k.startswith("time/") and k != "wall_time"}
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def test_tiny_serl_run_matches_the_golden_metrics(tiny_serl_run):
    # the run (`--device cpu`: recorded on a CPU) is shared with tests/eval/test_train_eval.py and
    # evaluates between steps; its training rows must still be the record's
    r = tiny_serl_run.result
    assert r.returncode == 0, r.stderr[-3000:]
    got = [g for g in _rows(tiny_serl_run.dir / "metrics.jsonl") if not any(k.startswith("eval/") for k in g)]
    if os.environ.get("SERL_RECORD_GOLDEN") == "1":
        GOLDEN.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in got))
    if not GOLDEN.is_file():
        pytest.skip(
            f"no record for this kind of CPU ({GOLDEN.name}); make one from a commit known to be right "
            "with SERL_RECORD_GOLDEN=1"
        )
    want = _rows(GOLDEN)
    assert [g["step"] for g in got] == [w["step"] for w in want]
    for g, w in zip(got, want):
        assert set(g) - ADDED == set(w) - ADDED, set(g) ^ set(w)
        assert ADDED <= set(g), ADDED - set(g)
        # every rolled-out answer is in the mean length; TINY_TRAIN samples 2 answers a prompt
        assert g["rollout/gen_tokens"] == pytest.approx(g["response/length_mean"] * g["batch/rolled_out"] * 2)
        assert g["train/tokens"] <= g["train/logprob_tokens"] and g["train/logprob_answer_tokens"] > 0
        for k, v in w.items():
            if isinstance(v, float) and not math.isnan(v):
                assert g[k] == pytest.approx(v, rel=1e-6, abs=1e-9), (w["step"], k)
            else:
                assert g[k] == v or (isinstance(v, float) and math.isnan(g[k])), (w["step"], k)
