"""Requests inside every limit cannot hold the reward server: fair scoring, limits
before per-sample work, idle connections given back, one Content-Length (all on
127.0.0.1, real sockets and concurrent clients, each bounded in count and time)."""

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from serl.rewards.lanes import Lanes, estimated_checks
from serl.rewards.server import RewardService, make_server

PROMPT = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"


def call(url, payload=None, timeout=60, raw=None):
    data = raw if raw is not None else (None if payload is None else json.dumps(payload).encode())
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
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


def hostile(prompts=4, distinct=128):
    """Distinct symbolic answers per prompt: up to distinct^2/2 math-verify checks each."""
    out = {"query": [], "prompts": [], "labels": []}
    for p in range(prompts):
        prompt = PROMPT.replace("2+2", f"polynomial {p}")
        for k in range(distinct):
            out["query"].append(prompt + f"\\boxed{{x^{{2}}+{k}y+{p}z}}")
            out["prompts"].append(prompt)
            out["labels"].append(None)
    return out


def start(service, **kw):
    server = make_server(service, "127.0.0.1", 0, **kw)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    host, port = server.server_address[:2]
    return server, f"http://{host}:{port}"


def stop(server):
    server.shutdown()
    server.server_close()


@pytest.fixture
def cli_server():
    """A real `serl serve-reward` process (its own fast and slow pools)."""
    procs = []

    def make(*args):
        proc = subprocess.Popen(
            [sys.executable, "-m", "serl.cli", "serve-reward", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        line = proc.stdout.readline()
        assert "http://" in line, proc.stderr.read()[-2000:]
        url = line.split("POST ", 1)[1].split("/get_reward")[0]
        assert call(url + "/get_reward", NORMAL, timeout=120)[0] == 200  # both pools' first start is done
        return url

    yield make
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_small_request_is_answered_while_two_big_ones_are_scored(cli_server):
    url = cli_server("--workers", "2", "--max_score_seconds", "40")
    big = []

    def heavy():
        try:
            big.append(call(url + "/get_reward", hostile(), timeout=60))
        except OSError:  # still scoring when the test stops the server
            pass

    threads = [threading.Thread(target=heavy, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(2.0)  # both are being scored now
    assert not big, big  # (each is far more than 2 s of checks)
    times = []
    for k in range(3):
        t0 = time.monotonic()
        status, body = call(url + "/get_reward", request(["4", "4", f"{5 + k}", "\\frac{8}{2}"]), timeout=40)
        times.append(time.monotonic() - t0)
        assert status == 200 and body["rewards"] == [1.0, 1.0, 0.0, 1.0]
    assert max(times) < 5.0, times
    status, health = call(url + "/health")
    assert status == 200 and health["ok"] is True, health  # the fast lane is fine
    assert health["checker"]["sent_to_slow_lane"] == 2


class StuckChecker:
    """A pool that never finishes until released (as a hung pool would)."""

    def __init__(self):
        self.release = threading.Event()
        self.stats = {}

    def run_jobs(self, jobs, time_budget=None):
        self.release.wait(30)
        return [{"cluster_of": list(range(len(j["strings"]))), "label_match": None} for j in jobs]

    def close(self):
        self.release.set()


def test_health_is_not_ok_within_seconds_when_the_fast_lane_is_stalled():
    fast, slow = StuckChecker(), StuckChecker()
    # the time budget (60 s) is far away: the stall is seen long before it
    service = RewardService(Lanes(fast, slow, stall_seconds=0.5))
    server, url = start(service)
    try:
        done = []
        t = threading.Thread(target=lambda: done.append(call(url + "/get_reward", NORMAL)), daemon=True)
        t.start()
        time.sleep(1.2)
        status, body = call(url + "/health")
        assert status == 503 and body["ok"] is False and body["lanes"]["fast_lane_oldest_s"] > 0.5
        fast.release.set()
        t.join(30)
        assert done and done[0][0] == 200
        assert call(url + "/health")[0] == 200
    finally:
        fast.release.set()
        slow.release.set()
        stop(server)


def test_estimated_checks():
    assert estimated_checks([{"kind": "group", "strings": ["1", "2", "3.5"]}]) == 0
    assert estimated_checks([{"kind": "group", "strings": ["x", "y", "1"]}]) == 6
    assert estimated_checks([{"kind": "pairs", "strings": ["x", "y"], "pairs": [(0, 1)]}]) == 1


def test_idle_connections_do_not_shut_others_out(checker):
    server, url = start(RewardService(checker), max_connections=32, max_idle_per_client=8)
    port = server.server_address[1]
    idle = []
    try:
        for _ in range(100):  # three times the slots, never a byte sent
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        time.sleep(0.3)
        status, body = call(url + "/get_reward", NORMAL, timeout=10)
        assert status == 200 and body["rewards"] == [1.0, 1.0, 0.0, 1.0]
        status, health = call(url + "/health", timeout=10)
        assert status == 200 and health["connections"]["idle"] <= 8
        closed = 0
        for s in idle:  # all but the newest few were closed by the server at once
            s.settimeout(0.05)
            try:
                closed += s.recv(1) == b""
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed += 1
        assert closed >= 90
    finally:
        for s in idle:
            s.close()
        stop(server)


def test_requests_waiting_for_their_group_cannot_take_every_slot(checker):
    # group_size 8, unique prompts: no group ever fills, each request holds a connection
    service = RewardService(checker, group_size=8, group_wait=60.0, max_waiting=16)
    server, url = start(service, max_connections=40)
    replies = []

    def lonely(k):
        t0 = time.monotonic()
        replies.append(
            (call(url + "/get_reward", request(["4"], prompt=PROMPT + f"#{k}"), timeout=70), time.monotonic() - t0)
        )

    threads = [threading.Thread(target=lonely, args=(k,), daemon=True) for k in range(60)]
    try:
        for t in threads:
            t.start()
            time.sleep(0.01)
        time.sleep(1.0)
        t0 = time.monotonic()
        status, body = call(url + "/get_reward", request(["4"] * 8, prompt=PROMPT + "whole"), timeout=20)
        assert status == 200 and body["rewards"] == [1.0] * 8 and time.monotonic() - t0 < 5
        deadline = time.monotonic() + 10
        while len(replies) < 44 and time.monotonic() < deadline:
            time.sleep(0.1)
        early = [r for r in replies if r[0][0] == 200 and r[0][1]["extra_logs"]["partial_group"] == [1]]
        assert len(early) >= 44 and all(seconds < 15 for _, seconds in early)  # voted early, not after 60 s
        assert call(url + "/health")[1]["waiting_samples"] <= 16
    finally:
        stop(server)
        for g in list(service._buckets.values()):
            for s in g:
                s.done.set()


def raw_exchange(port, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        reply = b""
        for _ in range(1000):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply


@pytest.mark.parametrize("extra", [b"Content-Length: 2\r\n", b"Transfer-Encoding: chunked\r\n"])
def test_a_second_content_length_or_a_transfer_encoding_is_400(checker, extra):
    server, url = start(RewardService(checker))
    try:
        body = json.dumps(NORMAL).encode()
        head = (
            (
                b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n" % len(body)
            )
            + extra
            + b"\r\n"
        )
        reply = raw_exchange(server.server_address[1], head + body)
        assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
        assert b"Content-Length" in reply
        assert call(url + "/get_reward", NORMAL)[0] == 200
    finally:
        stop(server)


def test_a_million_empty_strings_get_413_in_well_under_a_second_of_work(checker):
    server, url = start(RewardService(checker), max_request_mb=8.5)
    try:
        n = 10**6
        body = json.dumps({"query": [""] * n, "prompts": [""] * n}).encode()
        t0 = time.monotonic()
        status, out = call(url + "/get_reward", raw=body, timeout=60)
        assert status == 413 and "--max_samples" in out["error"]
        assert time.monotonic() - t0 < 4.0  # a decode; 20 s when every sample was built first
        assert call(url + "/health")[1]["counts"]["refused_too_large"] == 1
    finally:
        stop(server)


def test_huge_answers_are_refused_before_they_are_read_and_others_are_served(checker):
    server, url = start(RewardService(checker), max_request_mb=8.0)
    try:
        big = {"query": [PROMPT + "{" * (7 << 20)], "prompts": [PROMPT], "labels": [None]}
        out = []
        threads = [
            threading.Thread(target=lambda: out.append(call(url + "/get_reward", big, timeout=60)), daemon=True)
            for _ in range(3)
        ]
        for t in threads:
            t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        assert call(url + "/get_reward", NORMAL, timeout=30)[0] == 200
        assert time.monotonic() - t0 < 3.0
        for t in threads:
            t.join(60)
        assert [s for s, _ in out] == [413] * 3 and "--max_query_kb" in out[0][1]["error"]
    finally:
        stop(server)


class SlowPool:
    """A pool whose batches run past any budget (as a batch wrongly estimated small would)."""

    def __init__(self):
        self.stats, self.budgets = {}, []

    def run_jobs(self, jobs, time_budget=None):
        from serl.rewards.equivalence import OverBudget

        self.budgets.append(time_budget)
        time.sleep(time_budget)
        raise OverBudget("over")


class QuickPool:
    def __init__(self):
        self.stats, self.budgets = {}, []

    def run_jobs(self, jobs, time_budget=None):
        self.budgets.append(time_budget)
        return ["done"] * len(jobs)


def test_a_batch_over_the_fast_budget_goes_on_in_the_slow_lane_with_what_is_left():
    fast, slow = SlowPool(), QuickPool()
    lanes = Lanes(fast, slow, fast_budget=0.2)
    job = {"kind": "group", "strings": ["x", "y"]}
    assert lanes.run_jobs([job], time_budget=5.0) == ["done"]
    assert fast.budgets == [0.2] and 4.0 < slow.budgets[0] < 4.85 and lanes.stats["moved_to_slow_lane"] == 1
    big = {"kind": "group", "strings": [f"x+{k}" for k in range(40)]}  # 1,600 estimated checks
    assert lanes.run_jobs([big], time_budget=5.0) == ["done"] and len(fast.budgets) == 1  # straight to slow
    assert lanes.stats["sent_to_slow_lane"] == 1


def test_waiting_for_the_slow_lane_counts_against_the_budget():
    from serl.rewards.equivalence import OverBudget

    release = threading.Event()

    class Held(QuickPool):
        def run_jobs(self, jobs, time_budget=None):
            release.wait(10)
            return ["done"] * len(jobs)

    lanes = Lanes(QuickPool(), Held(), big_checks=0)
    first = threading.Thread(target=lambda: lanes.run_jobs([{"kind": "group", "strings": ["x", "y"]}], 30), daemon=True)
    first.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    with pytest.raises(OverBudget, match="slow lane stayed busy"):
        lanes.run_jobs([{"kind": "group", "strings": ["x", "y"]}], time_budget=0.5)
    assert time.monotonic() - t0 < 2
    release.set()
    first.join(10)
