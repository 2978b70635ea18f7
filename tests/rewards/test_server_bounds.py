"""serve-reward bounds the work one request can cause, says when it is stalled,
and ends its workers on SIGTERM (all on 127.0.0.1)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from serl.rewards.server import RewardService, make_server

PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


def start(service):
    server = make_server(service, "127.0.0.1", 0, max_request_mb=8.0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


def call(url, payload=None, timeout=60):
    req = urllib.request.Request(
        url,
        data=None if payload is None else json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def request(answers, prompt=PROMPT):
    return {
        "query": [prompt + "\\boxed{" + a + "}" for a in answers],
        "prompts": [prompt] * len(answers),
        "labels": [None] * len(answers),
    }


NORMAL = request(["4", "4", "5", "4"])


@pytest.fixture
def served(checker):
    servers = []

    def make(**kw):
        server, url = start(RewardService(checker, **kw))
        servers.append(server)
        return url

    yield make
    for s in servers:
        s.shutdown()
        s.server_close()


def test_too_many_samples_is_413_and_the_next_client_is_served(served):
    url = served(max_samples=8)
    status, body = call(url + "/get_reward", request([str(k % 3) for k in range(9)]))
    assert status == 413 and "9 samples" in body["error"] and "--max_samples" in body["error"]
    assert call(url + "/get_reward", NORMAL)[1]["rewards"] == [1.0, 1.0, 0.0, 1.0]


def test_too_many_distinct_answers_is_413_before_any_check(served, checker):
    url = served(max_distinct=8)
    jobs = checker.stats["jobs"]
    # 9 distinct answers (after the normal form: "4" and "4." are one) in one prompt's group
    status, body = call(url + "/get_reward", request(["4", "4."] + [str(k) for k in range(5, 13)]))
    assert status == 413, body
    assert "9 distinct answers" in body["error"] and "--max_distinct" in body["error"]
    assert checker.stats["jobs"] == jobs  # refused before the pool saw it
    status, body = call(url + "/get_reward", NORMAL)
    assert status == 200 and body["rewards"] == [1.0, 1.0, 0.0, 1.0]


def test_a_request_over_its_time_budget_gets_503_and_the_pool_recovers(served, checker):
    url = served(max_score_seconds=0.5)
    # 200 distinct answers that are not plain numbers: up to 19,900 math-verify checks
    status, body = call(url + "/get_reward", request([f"x^{{2}}+{k}y" for k in range(200)]))
    assert status == 503 and "--max_score_seconds" in body["error"], body
    status, body = call(url + "/get_reward", NORMAL)
    assert status == 200 and body["rewards"] == [1.0, 1.0, 0.0, 1.0]
    assert call(url + "/health")[1]["counts"]["over_budget"] == 1


class StuckChecker:
    """A pool that never finishes until released (as a hung pool would)."""

    def __init__(self):
        self.release = threading.Event()
        self.busy_since = None
        self.stats = {}

    def run_jobs(self, jobs, time_budget=None):
        self.busy_since = time.monotonic()
        self.release.wait(30)
        self.busy_since = None
        return [{"cluster_of": list(range(len(j["strings"]))), "label_match": None} for j in jobs]


def test_health_reports_a_stalled_scoring_as_not_ok():
    checker = StuckChecker()
    server, url = start(RewardService(checker, max_score_seconds=0.3))
    try:
        assert call(url + "/health")[0] == 200
        done = []
        t = threading.Thread(target=lambda: done.append(call(url + "/get_reward", NORMAL)))
        t.start()
        time.sleep(0.8)
        status, body = call(url + "/health")
        assert status == 503 and body["ok"] is False and body["scoring"] == 1
        assert body["oldest_scoring_s"] > 0.3 and body["pool_busy_s"] > 0.3
        checker.release.set()
        t.join(30)
        assert done and done[0][0] == 200
        status, body = call(url + "/health")
        assert status == 200 and body["ok"] is True and body["scoring"] == 0
    finally:
        checker.release.set()
        server.shutdown()
        server.server_close()


def descendants(pid: int) -> set[int]:
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        todo.extend(kids)
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_ends_the_workers_even_mid_job(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "serl.cli", "serve-reward", "--port", "0", "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    kids: set[int] = set()
    try:
        line = proc.stdout.readline()
        url = line.split("POST ", 1)[1].split("/get_reward")[0]

        # a long job: 250 distinct non-numbers are up to 31,125 math-verify checks
        def long_request():
            try:
                call(url + "/get_reward", request([f"x^{{2}}+{k}y" for k in range(250)]), timeout=120)
            except OSError:  # the server goes away mid-request: expected here
                pass

        threading.Thread(target=long_request, daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and call(url + "/health")[1]["counts"]["requests"] < 1:
            time.sleep(0.2)
        time.sleep(1.5)  # the workers are now busy clustering
        deadline = time.monotonic() + 20  # under load a worker may still be starting
        while len(kids := descendants(proc.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(kids) >= 3  # the forkserver and two workers (and the resource tracker)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, proc.stderr.read()[-3000:]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(k) for k in kids):
            time.sleep(0.2)
        assert not [k for k in kids if alive(k)]
    finally:
        if proc.poll() is None:
            proc.kill()
        for k in kids | descendants(proc.pid):
            if alive(k):
                os.kill(k, signal.SIGKILL)
