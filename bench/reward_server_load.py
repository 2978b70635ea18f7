"""Load on `serl serve-reward`: N samples from C concurrent clients, one sample per request.

    python bench/reward_server_load.py [--samples 10000] [--clients 32] [--group_size 8] [--runs 5]
                                       [--connection both|new|keepalive] [--workers 2] [--hostile 0]
                                       [--no-record]

This is how OpenRLHF 0.11 calls a remote reward server: every sample is its own POST,
the n samples of a prompt are sent one after another (prompt-major order), and the
server, started with `--group_size n`, holds them until their group is complete and
votes. Each group of `--group_size` has a known majority: `size // 2 + 1` answers that
are the same number written in different ways (one needs math-verify), the others wrong
numbers or no answer, shuffled; so every reward is known and is checked.

The server is a real `serl serve-reward` process on 127.0.0.1 (port picked by the OS).
`--connection new` opens a connection per request, as OpenRLHF 0.11 does (a fresh
`aiohttp.ClientSession` per call); `keepalive` reuses one connection per client; `both`
(default) runs each. Clients are threads of this process, so they share the machine
with the server: the numbers are for both on one box. One warm-up group (which starts
the worker pool) is sent before the clock starts; each run has a fresh server.

`--hostile N` adds N clients that each keep one request inside every limit in flight for
the whole run: 16 prompts x 256 distinct symbolic answers (0.27 MB, up to half a million
math-verify checks each), the request that held the single worker pool for 60 s. Their own
replies (usually 503 at --max_score_seconds) are counted apart; the load's latency is what
the fair scoring must keep low.

Target: >= 500 requests/s with 32 clients (new connection per request), 0 errors,
0 wrong rewards; with --hostile 2, p99 <= 5 s.
"""
from __future__ import annotations

import argparse
import http.client
import json
import queue
import random
import statistics
import subprocess
import sys
import threading
import time

from _common import ROOT, append_result, load_avg, spread

PROMPT = "<|im_start|>user\nProblem {k}: what is {a} + {b}? Put the answer in \\boxed{{}}.<|im_end|>\n" \
         "<|im_start|>assistant\n"


def make_samples(n: int, group_size: int, seed: int) -> list[tuple[str, str, float]]:
    """(prompt, response, expected reward), prompt-major: the samples of a group are consecutive."""
    rng = random.Random(seed)
    out = []
    for k in range((n + group_size - 1) // group_size):
        a, b = rng.randint(1, 500), rng.randint(1, 500)
        v = a + b
        same = [f"So the total is \\boxed{{{v}}}.", f"\\boxed{{{v}}}", f"{a} + {b} = \\boxed{{{v}.0}}",
                f"That gives \\boxed{{\\frac{{{2 * v}}}{{2}}}}"]  # the last one needs math-verify
        majority = [(same[i % len(same)], 1.0) for i in range(group_size // 2 + 1)]
        minority = [(f"I think \\boxed{{{v + 1 + i}}}" if i % 3 else "no idea", 0.0)
                    for i in range(group_size - len(majority))]
        group = majority + minority
        rng.shuffle(group)
        prompt = PROMPT.format(k=k, a=a, b=b)
        out += [(prompt, text, reward) for text, reward in group]
    return out  # whole groups: n rounded up to a multiple of group_size


class Client(threading.Thread):
    """Takes samples off the shared queue until it is empty; one POST per sample."""

    def __init__(self, host, port, work: queue.Queue, keepalive: bool, timeout: float):
        super().__init__(daemon=True)
        self.host, self.port, self.work, self.keepalive, self.timeout = host, port, work, keepalive, timeout
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.wrong = 0
        self.conn = None

    def _post(self, body: bytes) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        headers = {"Content-Type": "application/json"}
        if not self.keepalive:
            headers["Connection"] = "close"
        self.conn.request("POST", "/get_reward", body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        if not self.keepalive or r.will_close:
            self.conn.close()
            self.conn = None
        return r.status, data

    def run(self):
        while True:
            try:
                prompt, text, expected = self.work.get_nowait()
            except queue.Empty:
                break
            body = json.dumps({"query": [prompt + text], "prompts": [prompt], "labels": [None]}).encode()
            t = time.perf_counter()
            try:
                status, data = self._post(body)
            except (OSError, http.client.HTTPException) as e:
                self.errors.append(f"{type(e).__name__}: {e}")
                if self.conn is not None:
                    self.conn.close()
                    self.conn = None
                continue
            self.latencies.append(time.perf_counter() - t)
            if status != 200:
                self.errors.append(f"HTTP {status}: {data[:200]!r}")
                continue
            if json.loads(data)["rewards"] != [expected]:
                self.wrong += 1
        if self.conn is not None:
            self.conn.close()


def hostile_body() -> bytes:
    """16 prompts x 256 distinct symbolic answers: inside every default limit of the server."""
    q, p = [], []
    for k in range(16):
        prompt = PROMPT.format(k=f"hostile {k}", a=k, b=k)
        for j in range(256):
            q.append(prompt + f"\\boxed{{x^{{2}}+{j}y+{k}z}}")
            p.append(prompt)
    return json.dumps({"query": q, "prompts": p, "labels": [None] * len(q)}).encode()


class Hostile(threading.Thread):
    """Keeps one hostile request in flight until ``stop`` is set; records each reply's status."""

    def __init__(self, host, port, stop: threading.Event):
        super().__init__(daemon=True)
        self.host, self.port, self.stop, self.statuses = host, port, stop, []

    def run(self):
        body = hostile_body()
        while not self.stop.is_set():
            conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
            try:
                conn.request("POST", "/get_reward", body=body, headers={"Content-Type": "application/json"})
                status = conn.getresponse().status
            except (OSError, http.client.HTTPException) as e:
                status = type(e).__name__
            finally:
                conn.close()
            if not self.stop.is_set():  # one still in flight when the run ends is cut by the server's stop
                self.statuses.append(status)


def start_server(group_size: int, workers: int, group_wait: float) -> tuple[subprocess.Popen, str, int]:
    cmd = [sys.executable, "-m", "serl.cli", "serve-reward", "--port", "0", "--group_size", str(group_size),
           "--group_wait", str(group_wait), "--workers", str(workers)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # "serl serve-reward: POST http://127.0.0.1:PORT/get_reward ..."
    if "http://" not in line:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    host_port = line.split("http://", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    return proc, host, int(port)


def health(host, port) -> dict:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/health")
    out = json.loads(conn.getresponse().read())
    conn.close()
    return out


def one_run(a, samples) -> dict:
    proc, host, port = start_server(a.group_size, a.workers, a.group_wait)
    try:
        warm = queue.Queue()
        for p, t, r in make_samples(a.group_size, a.group_size, seed=10**6):
            warm.put((p.replace("Problem", "Warm-up problem"), t, r))
        warmers = [Client(host, port, warm, True, a.timeout) for _ in range(a.group_size)]
        for c in warmers:
            c.start()
        for c in warmers:
            c.join(a.timeout)
        before = health(host, port)["counts"]
        stop = threading.Event()
        hostile = [Hostile(host, port, stop) for _ in range(a.hostile)]
        for h in hostile:
            h.start()
        if hostile:
            time.sleep(2.0)  # both are being scored before the load starts
        work: queue.Queue = queue.Queue()
        for s in samples:
            work.put(s)
        clients = [Client(host, port, work, a.connection == "keepalive", a.timeout) for _ in range(a.clients)]
        t0 = time.perf_counter()
        for c in clients:
            c.start()
        deadline = t0 + a.deadline
        for c in clients:
            c.join(max(0.0, deadline - time.perf_counter()))
        wall = time.perf_counter() - t0
        hung = sum(c.is_alive() for c in clients)
        after = health(host, port)
        stop.set()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    lat = sorted(x for c in clients for x in c.latencies)
    errors = [e for c in clients for e in c.errors]
    done = len(lat)
    return {
        "requests": done, "seconds": round(wall, 3), "req_per_s": round(done / wall, 1),
        "errors": len(errors) + hung, "error_examples": errors[:3], "wrong_rewards": sum(c.wrong for c in clients),
        "latency_ms": {"p50": round(1000 * statistics.median(lat), 2) if lat else None,
                       "p99": round(1000 * lat[int(0.99 * (len(lat) - 1))], 2) if lat else None,
                       "max": round(1000 * lat[-1], 2) if lat else None},
        "partial_groups": after["counts"]["partial_groups"] - before["partial_groups"],
        "groups": after["counts"]["groups"] - before["groups"],
        "checker": {k: after["checker"].get(k, 0) for k in ("restarts", "crashes", "timeouts", "verify_calls")},
        "hostile_replies": [s for h in hostile for s in h.statuses],
    }


def measure(a, samples, connection: str) -> dict:
    a.connection = connection
    runs = []
    for i in range(a.runs):
        r = one_run(a, samples)
        runs.append(r)
        print(f"{connection} run {i + 1}/{a.runs}: {r['requests']} requests in {r['seconds']:.2f} s = "
              f"{r['req_per_s']:.0f} req/s, errors {r['errors']}, wrong rewards {r['wrong_rewards']}, partial "
              f"groups {r['partial_groups']}, latency p50 {r['latency_ms']['p50']} ms p99 {r['latency_ms']['p99']} "
              f"ms max {r['latency_ms']['max']} ms" + (f", hostile replies {r['hostile_replies']}"
                                                        if a.hostile else ""), flush=True)
    rate = spread([r["req_per_s"] for r in runs])
    ok = all(r["errors"] == 0 and r["wrong_rewards"] == 0 and r["requests"] == len(samples) for r in runs)
    print(f"{connection}: median {rate['median']:.0f} req/s (min {rate['min']:.0f}, max {rate['max']:.0f}, spread "
          f"{100 * rate['spread']:.0f} %); all rewards right and no errors: {ok}")
    return {"req_per_s": rate, "all_right": ok, "runs": runs}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=10000, help="samples (= requests) per run")
    ap.add_argument("--clients", type=int, default=32, help="concurrent clients")
    ap.add_argument("--group_size", type=int, default=8, help="samples per prompt (server --group_size)")
    ap.add_argument("--group_wait", type=float, default=60.0, help="server --group_wait (s)")
    ap.add_argument("--workers", type=int, default=2, help="server --workers (math-verify processes)")
    ap.add_argument("--connection", choices=("both", "new", "keepalive"), default="both",
                    help="a new connection per request (as OpenRLHF), one kept alive per client, or both")
    ap.add_argument("--runs", type=int, default=5, help="runs per connection mode, each with a fresh server")
    ap.add_argument("--timeout", type=float, default=60.0, help="per-request client timeout (s)")
    ap.add_argument("--deadline", type=float, default=600.0, help="a run is stopped after this many seconds")
    ap.add_argument("--hostile", type=int, default=0,
                    help="clients each keeping one in-limit 16 x 256 symbolic-answer request in flight")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-record", action="store_true", help="do not append to bench/results.jsonl")
    a = ap.parse_args(argv)
    if a.clients < a.group_size:
        ap.error("--clients must be >= --group_size: fewer clients than a group could never complete one")
    samples = make_samples(a.samples, a.group_size, a.seed)
    modes = ("new", "keepalive") if a.connection == "both" else (a.connection,)
    results = {mode: measure(a, samples, mode) for mode in modes}
    ok = all(r["all_right"] for r in results.values())
    head = results.get("new", next(iter(results.values())))
    met = ok and "new" in results and head["req_per_s"]["median"] >= 500 and a.clients >= 32
    print(f"target (>= 500 req/s, 32 clients, new connection per request, all right): "
          f"{'met' if met else 'not met'}; load avg {load_avg()}")
    if not a.no_record:
        append_result({"bench": "reward_server", "samples": len(samples), "clients": a.clients, "hostile": a.hostile,
                       "group_size": a.group_size, "workers": a.workers, "all_right": ok, "target_met": met,
                       "modes": results})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
