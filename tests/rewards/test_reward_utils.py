"""The reward files in reward_utils/, loaded by path the way OpenRLHF does."""

import asyncio
import importlib.util
import threading
from pathlib import Path

import pytest

from serl.rewards.server import RewardService, make_server

ROOT = Path(__file__).resolve().parents[2] / "reward_utils"
P = "<|im_start|>user\nWhat is 3+4? Give 2 reasons.<|im_end|>\n<|im_start|>assistant\n"


def load(name):
    spec = importlib.util.spec_from_file_location("reward_func", ROOT / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rule_reward_file_per_sample_and_batched():
    f = load("math_rule_reward.py").reward_func
    out = f([P + "so \\boxed{7}"], [P], ["#### 7"])
    assert out["rewards"].tolist() == [1.0] and out["scores"].tolist() == [1.0]
    out = f([P + "\\boxed{7}", P + "it is 8", P + "no idea", P + "\\boxed{7}"], [P] * 4, ["\\boxed{7}", "7", "7", None])
    assert out["rewards"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert out["extra_logs"]["no_answer"].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert out["extra_logs"]["no_label"].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_majority_file_votes_on_whole_groups():
    f = load("majority_vote_reward.py").reward_func
    q = [P + "\\boxed{7}", P + "\\boxed{8}", P + "7", "other" + "\\boxed{1}"]
    out = f(q, [P, P, P, "other"], [None] * 4)
    # the prompt's "3", "4" and "2" never count; the lone "other" sample is not voted
    assert out["rewards"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert out["extra_logs"]["ungrouped"].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_majority_file_forwards_single_samples_to_the_server(checker, monkeypatch):
    server = make_server(RewardService(checker, group_size=3, group_wait=30), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host, port = server.server_address[:2]
        monkeypatch.setenv("SERL_REWARD_URL", f"http://{host}:{port}/get_reward")
        f = load("majority_vote_reward.py").reward_func
        results = {}

        def one(k, text):
            results[k] = f([P + text], [P], [None])["rewards"].tolist()

        threads = [
            threading.Thread(target=one, args=(k, t))
            for k, t in enumerate(["\\boxed{7}", "\\boxed{9}", "\\boxed{\\frac{14}{2}}"])
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {0: [1.0], 1: [0.0], 2: [1.0]}
    finally:
        server.shutdown()
        server.server_close()


def test_openrlhf_loads_the_file_by_path():
    agent = pytest.importorskip(
        "openrlhf.utils.agent", reason="openrlhf not installed (pip install --no-deps openrlhf)"
    )
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(ROOT / "math_rule_reward.py"))
    out = asyncio.run(executor._fetch_rewards_via_func([P + "\\boxed{7}", P + "8"], [P, P], ["7", "7"]))
    assert [o["rewards"].tolist() for o in out] == [[1.0], [0.0]]


@pytest.mark.parametrize(
    "serl_name, ours",
    [("math_verify_reward.py", "math_rule_reward.py"), ("math_verify_maj_reward.py", "majority_vote_reward.py")],
)
def test_serl_s_own_file_names_give_the_same_rewards(serl_name, ours):
    """SeRL's README passes math_verify_(maj_)reward.py; they are serl's two files under those names."""
    q = [P + "\\boxed{7}", P + "\\boxed{8}", P + "7", "other" + "\\boxed{1}"]
    prompts, labels = [P, P, P, "other"], ["7", "7", "8", "1"]
    a, b = load(serl_name).reward_func(q, prompts, labels), load(ours).reward_func(q, prompts, labels)
    assert a["rewards"].tolist() == b["rewards"].tolist() and a["extra_logs"].keys() == b["extra_logs"].keys()
