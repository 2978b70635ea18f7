"""OpenRLHF reward file: rule reward against the label (works per sample).

    --remote_rm_url /path/to/reward_utils/math_rule_reward.py

``reward_func(queries, prompts, labels)``: the response is the query with the
prompt removed; its answer (last \\boxed{}, else last number) is compared with
the label (``#### N``, ``\\boxed{}`` or plain) by serl's equivalence checker.
A sample without a label gets 0 and ``extra_logs["no_label"] = 1``.
Environment: SERL_REWARD_FALLBACK (none|number|choice, default number),
SERL_REWARD_TIMEOUT, SERL_REWARD_WORKERS.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serl_reward_common import checker, pack  # noqa: E402

from serl.rewards import extract_answer, normalize_label  # noqa: E402
from serl.rewards.server import response_text  # noqa: E402


def reward_func(queries, prompts, labels, **kwargs):
    fallback = os.environ.get("SERL_REWARD_FALLBACK", "number")
    answers = [extract_answer(response_text(q, p), fallback) for q, p in zip(queries, prompts)]
    golds = [normalize_label(x) for x in (labels or [None] * len(queries))]
    todo = [(g, a) for g, a in zip(golds, answers) if g is not None and a is not None]
    results = iter(checker().equal_many(todo))
    rewards = [float(next(results)) if g is not None and a is not None else 0.0 for g, a in zip(golds, answers)]
    return pack(rewards, {
        "no_answer": [float(a is None) for a in answers],
        "no_label": [float(g is None) for g in golds],
    })
