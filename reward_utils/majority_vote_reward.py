"""OpenRLHF reward file: majority-vote self-reward (needs whole groups).

    --remote_rm_url /path/to/reward_utils/majority_vote_reward.py

A vote needs all n responses of a prompt at once.  Two ways to get them:

* The caller passes whole groups in one call (samples are grouped by prompt
  text): the vote runs here, in serl's process pool.
* OpenRLHF 0.11 calls a reward file once per sample.  Then start
  ``serl serve-reward --group_size <n_samples_per_prompt>`` and either point
  ``--remote_rm_url`` at ``http://127.0.0.1:PORT/get_reward`` directly, or set
  ``SERL_REWARD_URL`` to that address: this file then forwards each call to the
  server, which holds samples until their group is complete.

Without SERL_REWARD_URL a prompt with a single sample in a call cannot be voted
on; it gets reward 0 and ``extra_logs["ungrouped"] = 1`` (a vote of one would
reward every answered response).
"""
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from serl_reward_common import checker, pack  # noqa: E402

from serl.rewards import score_groups  # noqa: E402
from serl.rewards.server import response_text  # noqa: E402


def _forward(url, queries, prompts, labels):
    body = json.dumps({"query": list(queries), "prompts": list(prompts), "labels": list(labels)}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    timeout = float(os.environ.get("SERL_REWARD_HTTP_TIMEOUT", "600"))
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        out = json.loads(resp.read())
    return pack(out["rewards"], {k: v for k, v in out.get("extra_logs", {}).items()})


def reward_func(queries, prompts, labels, **kwargs):
    labels = list(labels) if labels is not None else [None] * len(queries)
    url = os.environ.get("SERL_REWARD_URL")
    if url:
        return _forward(url, queries, prompts, labels)
    fallback = os.environ.get("SERL_REWARD_FALLBACK", "number")
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(prompts):
        groups.setdefault(p, []).append(i)
    voted = [idx for idx in groups.values() if len(idx) > 1]
    scores = score_groups([[response_text(queries[i], prompts[i]) for i in idx] for idx in voted],
                          None, checker(), "majority", fallback)
    n = len(queries)
    rewards, agreement, ungrouped, tie = [0.0] * n, [0.0] * n, [1.0] * n, [0.0] * n
    for idx, gs in zip(voted, scores):
        for k, i in enumerate(idx):
            rewards[i], agreement[i], ungrouped[i], tie[i] = gs.rewards[k], gs.agreement, 0.0, float(gs.tie)
    return pack(rewards, {"agreement": agreement, "ungrouped": ungrouped, "tie": tie})
