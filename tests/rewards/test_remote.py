"""--remote_rm_url's client: a real `serl serve-reward` on 127.0.0.1, SeRL's reward files,
stub servers that fail in given ways. Loopback only; every loop is bounded."""

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from serl import ConfigError
from serl.rewards import score_groups
from serl.rewards.remote import (
    FileReward,
    HttpReward,
    RemoteRewardError,
    batches,
    check_spec,
    load_source,
    score_remote,
    shown_url,
)

ROOT = Path(__file__).resolve().parents[2]
P = "<|im_start|>user\nWhat is 3+4?<|im_end|>\n<|im_start|>assistant\n"
Q = "<|im_start|>user\nWhat is 10-1?<|im_end|>\n<|im_start|>assistant\n"
# group 1: 7 twice, 8 once, one without an answer -> majority 7: [1, 1, 0, 0], agreement 2/4
# group 2: 9, 9.0 (equal), 10 -> majority 9: [1, 1, 0], agreement 2/3
GROUPS = [
    ["so \\boxed{7}", "\\boxed{8}", "it is \\boxed{7}", "no idea \\boxed{\\text{}}"],
    ["\\boxed{9}", "\\boxed{9.0}", "\\boxed{10}"],
]


@pytest.fixture(scope="module")
def serve_reward():
    """`serl serve-reward --port 0` in a subprocess; yields its URL."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "serl.cli", "serve-reward", "--port", "0", "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()  # "serl serve-reward: POST http://127.0.0.1:PORT/get_reward (...)"
    try:
        assert "POST http://127.0.0.1:" in line, proc.stderr.read()[-2000:]
        yield line.split("POST ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_majority_through_serve_reward_equals_the_built_in_vote(serve_reward, checker):
    remote = score_remote(HttpReward(serve_reward, timeout=60, retries=0), [P, Q], GROUPS, [None, None])
    local = score_groups(GROUPS, None, checker, mode="majority")
    assert [s.rewards for s in remote] == [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]
    assert [s.rewards for s in remote] == [s.rewards for s in local]
    assert [s.agreement for s in remote] == [s.agreement for s in local] == [0.5, 2 / 3]
    assert [s.n_no_answer for s in remote] == [s.n_no_answer for s in local] == [1, 0]
    assert [s.n_clusters for s in remote] == [s.n_clusters for s in local] == [2, 2]
    assert [s.answers for s in remote] == [s.answers for s in local]


def test_batches_keep_groups_whole_and_the_vote_unchanged(serve_reward):
    assert batches([4, 3, 2, 5], 0) == [range(0, 4)]
    assert batches([4, 3, 2, 5], 6) == [range(0, 1), range(1, 3), range(3, 4)]  # 4 | 3+2 | 5
    assert batches([8, 1], 4) == [range(0, 1), range(1, 2)]  # a group over the limit goes alone
    src = HttpReward(serve_reward, timeout=60, retries=0)
    one = score_remote(src, [P, Q], GROUPS, [None, None], batch_size=4)
    assert src.requests == 2 and [s.rewards for s in one] == [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]


def test_serl_rule_reward_file(checker):
    src = FileReward(str(ROOT / "reward_utils/math_rule_reward.py"))
    out = score_remote(src, [P, Q], [["\\boxed{7}", "8", "none"], ["\\boxed{9}"]], ["7", "#### 9"])
    assert [s.rewards for s in out] == [[1.0, 0.0, 0.0], [1.0]]
    assert [s.agreement for s in out] == [pytest.approx(1 / 3), 1.0]
    assert out[0].n_no_answer == 1  # "none": no boxed answer and no number


def test_serl_majority_file_equals_the_built_in_vote(checker):
    src = FileReward(str(ROOT / "reward_utils/majority_vote_reward.py"))
    out = score_remote(src, [P, Q], GROUPS, [None, None])
    assert [s.rewards for s in out] == [s.rewards for s in score_groups(GROUPS, None, checker)]


def _write(tmp_path, text, name="my_reward.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_reward_file_errors_name_file_and_line(tmp_path):
    path = _write(
        tmp_path,
        "import math\n\ndef reward_func(queries, prompts, labels):\n"
        "    return [len(q) for q in queries]\n\n\ndef broken(q):\n    return 1 / 0\n",
    )
    assert FileReward(path).rewards(["ab", "c"], ["", ""], [None, None]).rewards == [2.0, 1.0]
    bad = _write(
        tmp_path,
        "def helper(q):\n    raise KeyError(q)\n\n\ndef reward_func(queries, prompts, labels):\n"
        "    return [helper(q) for q in queries]\n",
        "bad.py",
    )
    with pytest.raises(RemoteRewardError, match=r"bad\.py:2: reward_func raised KeyError"):
        FileReward(bad).rewards(["x"], [""], [None])
    syn = _write(tmp_path, "def reward_func(queries, prompts, labels):\n    return [\n\nx = (\n", "syn.py")
    with pytest.raises(RemoteRewardError, match=r"syn\.py:\d+: syntax error"):
        FileReward(syn)
    none = _write(tmp_path, "x = 1\n", "none.py")
    with pytest.raises(RemoteRewardError, match="defines no reward_func"):
        FileReward(none)
    short = _write(tmp_path, "def reward_func(queries, prompts, labels):\n    return {'rewards': [1.0]}\n", "s.py")
    with pytest.raises(RemoteRewardError, match="expected 'rewards' with 2 numbers, got 1 entries"):
        FileReward(short).rewards(["a", "b"], ["", ""], [None, None])
    nan = _write(tmp_path, "def reward_func(queries, prompts, labels):\n    return [float('nan')]\n", "n.py")
    with pytest.raises(RemoteRewardError, match=r"rewards\[0\] is not a finite number"):
        FileReward(nan).rewards(["a"], [""], [None])
    # at prepare time: a ConfigError (exit 2) naming the option
    cfg = SimpleNamespace(remote_rm_url=syn, remote_rm_timeout=1.0, remote_rm_retries=0)
    with pytest.raises(ConfigError, match=r"remote_rm_url: .*syn\.py:\d+"):
        load_source(cfg)


class _Stub(BaseHTTPRequestHandler):
    plan: list = []  # per request: (status, body dict, delay s); the last one repeats
    seen: list = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(n))
        type(self).seen.append(body)
        status, reply, delay = self.plan[min(len(self.seen) - 1, len(self.plan) - 1)]
        time.sleep(delay)
        data = json.dumps(reply(body) if callable(reply) else reply).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def log_message(self, *a):
        pass


@pytest.fixture
def stub():
    servers = []

    def start(plan):
        handler = type("H", (_Stub,), {"plan": plan, "seen": []})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}/get_reward?token=SECRET", handler

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def ones(body):
    return {"rewards": [1.0] * len(body["query"])}


def test_a_5xx_is_retried_and_the_request_is_openrlhf_s(stub):
    url, h = stub([(503, {"error": "busy"}, 0), (200, ones, 0)])
    out = HttpReward(url, timeout=10, retries=2, backoff=0.01).rewards([P + "a", P + "b"], [P, P], ["7", None])
    assert out.rewards == [1.0, 1.0] and len(h.seen) == 2
    assert h.seen[1] == {"query": [P + "a", P + "b"], "prompts": [P, P], "labels": ["7", None]}


def test_a_4xx_is_not_retried(stub):
    url, h = stub([(400, {"error": "field 'prompts' is required"}, 0)])
    with pytest.raises(RemoteRewardError, match=r"HTTP 400 \(field 'prompts' is required\); not retried"):
        HttpReward(url, timeout=10, retries=3, backoff=0.01).rewards(["a"], [""], [None])
    assert len(h.seen) == 1


def test_a_down_endpoint_fails_after_the_retries_naming_the_url_without_secrets():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/get_reward?token=SECRET"
    t0 = time.monotonic()
    with pytest.raises(RemoteRewardError) as e:
        HttpReward(url, timeout=5, retries=2, backoff=0.05).rewards(["a"], [""], [None])
    msg = str(e.value)
    assert f"http://127.0.0.1:{port}/get_reward: no rewards after 3 tries" in msg and "SECRET" not in msg
    assert time.monotonic() - t0 < 5  # refused connections: 0.05 + 0.1 s of back-off


def test_a_slow_reply_times_out_and_a_bad_reply_is_refused(stub):
    url, h = stub([(200, ones, 1.5)])
    t0 = time.monotonic()
    with pytest.raises(RemoteRewardError, match="no rewards after 2 tries"):
        HttpReward(url, timeout=0.3, retries=1, backoff=0.01).rewards(["a"], [""], [None])
    assert time.monotonic() - t0 < 1.5 * 2  # each try gave up at its deadline, not at the reply
    url, h = stub([(200, {"rewards": [1.0, 2.0]}, 0)])
    with pytest.raises(RemoteRewardError, match=r"expected 'rewards' with 1 numbers, got 2 entries"):
        HttpReward(url, timeout=5, retries=0).rewards(["a"], [""], [None])
    url, h = stub([(200, {"scores": [1.0]}, 0)])
    with pytest.raises(RemoteRewardError, match="no 'rewards' in the reply"):
        HttpReward(url, timeout=5, retries=0).rewards(["a"], [""], [None])


def test_check_spec(tmp_path):
    assert check_spec("http://127.0.0.1:5000/get_reward") is None
    assert "user:password" in check_spec("http://bob:hunter2@127.0.0.1:5000/x")
    assert "hunter2" not in check_spec("http://bob:hunter2@127.0.0.1:5000/x")
    for q in ("api_key=hunter2", "token=hunter2", "x=1&Access_Token=hunter2", "sig=hunter2"):
        why = check_spec(f"http://127.0.0.1:5000/x?{q}")
        assert "query carries a credential" in why and "hunter2" not in why
    assert check_spec("http://127.0.0.1:5000/x?route=main&n=2") is None
    assert "not found" in check_spec(str(tmp_path / "nope.py"))
    assert "expected an http(s):// URL or a .py file" in check_spec("reward.txt")
    assert shown_url("https://h.example:8443/r?k=SECRET") == "https://h.example:8443/r"
