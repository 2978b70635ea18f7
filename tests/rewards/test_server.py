"""serve-reward over real HTTP on 127.0.0.1, with the exact OpenRLHF JSON."""

import asyncio
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from serl.rewards.server import RewardService, make_server, response_text
from serl.rewards.server_cli import cli_main

PROMPT = "<|im_start|>user\nTom has 17 apples and gives away 5. How many are left?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
def serve(checker):
    servers = []

    def start(**kw):
        service = RewardService(checker, **kw)
        server = make_server(service, "127.0.0.1", 0, max_request_mb=kw.pop("max_mb", 1.0))
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        host, port = server.server_address[:2]
        return f"http://{host}:{port}/get_reward", service

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def post(url, payload, raw=None):
    body = raw if raw is not None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def post_at_capacity(url, payload):
    """post(), where a refusal may also arrive as a closed socket: at capacity the server
    answers 503 and closes without reading the body, so a slow client can hit a broken pipe."""
    try:
        return post(url, payload)
    except urllib.error.URLError as e:
        if isinstance(e.reason, (BrokenPipeError, ConnectionResetError)):
            return 503, None
        raise


def request(responses, labels=None, prompt=PROMPT):
    return {
        "query": [prompt + r for r in responses],
        "prompts": [prompt] * len(responses),
        "labels": labels if labels is not None else [None] * len(responses),
    }


def test_binds_localhost_by_default(serve):
    url, _ = serve()
    assert url.startswith("http://127.0.0.1:")


def test_whole_group_in_one_request(serve):
    url, _ = serve()
    status, out = post(url, request(["so \\boxed{12}", "\\boxed{12.0}", "I get 13", "dunno"]))
    assert status == 200
    # the prompt's 17 and 5 are never answers: "dunno" has none
    assert out["rewards"] == [1.0, 1.0, 0.0, 0.0] and out["scores"] == out["rewards"]
    assert out["extra_logs"]["no_answer"] == [0, 0, 0, 1]
    assert out["extra_logs"]["agreement"] == [0.5] * 4


def test_groups_collected_across_single_sample_requests(serve):
    url, service = serve(group_size=4, group_wait=30)
    answers = ["\\boxed{12}", "\\boxed{13}", "\\boxed{12}", "\\boxed{\\frac{24}{2}}"]
    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda a: post(url, request([a])), answers))
    assert [o[1]["rewards"] for o in outs] == [[1.0], [0.0], [1.0], [1.0]]
    assert all(o[1]["extra_logs"]["group_n"] == [4] for o in outs)
    assert service.counts["groups"] == 1 and service.counts["partial_groups"] == 0


def test_incomplete_group_is_voted_after_the_wait(serve):
    url, service = serve(group_size=8, group_wait=0.5)
    status, out = post(url, request(["\\boxed{3}", "\\boxed{3}", "\\boxed{4}"]))
    assert status == 200 and out["rewards"] == [1.0, 1.0, 0.0]
    assert out["extra_logs"]["partial_group"] == [1, 1, 1] and service.counts["partial_groups"] == 1


def test_auto_mode_uses_labels_where_present(serve):
    url, _ = serve(mode="auto")
    payload = request(["\\boxed{4}", "\\boxed{3}"], labels=["#### 4", "#### 4"])
    payload["query"] += [PROMPT + "\\boxed{9}", PROMPT + "\\boxed{9}"]
    payload["prompts"] += [PROMPT, PROMPT]
    payload["labels"] += [None, None]
    status, out = post(url, payload)
    assert out["rewards"] == [1.0, 0.0, 1.0, 1.0]
    assert out["extra_logs"]["rule"] == [1, 1, 0, 0]


@pytest.mark.parametrize(
    "raw, status, fragment",
    [
        (b"{not json", 400, "JSON"),
        (b"[1, 2]", 400, "object"),
        (json.dumps({"query": "x", "prompts": []}).encode(), 400, "'query'"),
        (json.dumps({"query": ["a"]}).encode(), 400, "'prompts'"),
        (json.dumps({"query": ["a", "b"], "prompts": ["a"]}).encode(), 400, "'prompts'"),
        (json.dumps({"query": [1], "prompts": ["a"]}).encode(), 400, "'query'[0]"),
        (json.dumps({"query": ["a"], "prompts": ["a"], "labels": [[1]]}).encode(), 400, "'labels'[0]"),
        (b"\xff\xfe", 400, "JSON"),
        (b"[" * 200_000 + b"]" * 200_000, 400, "nested too deeply"),
        (b'{"query": ["a"], "prompts": ["a"], "labels": [' + b"9" * 5000 + b"]}", 400, "JSON"),
        (json.dumps({"query": ["a"], "prompts": ["a"], "labels": [True]}).encode(), 400, "'labels'[0]"),
        (b'{"query": ["a", "b"], "prompts": ["a", "b"], "labels": ["1", NaN]}', 400, "'labels'[1] must be a finite"),
        (b'{"query": ["a"], "prompts": ["a"], "labels": [-Infinity]}', 400, "'labels'[0] must be a finite"),
        (b'{"query": ["a"], "prompts": ["a"], "labels": [1e999]}', 400, "'labels'[0] must be a finite"),
        (b'{"query": [NaN], "prompts": ["a"]}', 400, "'query'[0]"),
    ],
)
def test_malformed_requests_get_4xx(serve, raw, status, fragment):
    url, _ = serve()
    code, out = post(url, None, raw=raw)
    assert code == status and fragment in out["error"]
    assert post(url, request(["\\boxed{1}", "\\boxed{1}"]))[1]["rewards"] == [1.0, 1.0]  # still serving


def test_rule_mode_without_label_is_400(serve):
    url, _ = serve(mode="rule")
    code, out = post(url, request(["\\boxed{1}"]))
    assert code == 400 and "label" in out["error"]


def test_oversized_body_is_413(serve):
    url, _ = serve()
    code, out = post(url, None, raw=b" " * (16 * 1024 * 1024))  # more than socket buffers hold
    assert code == 413 and "limit" in out["error"]


def test_unknown_path_is_404(serve):
    url, _ = serve()
    code, out = post(url.replace("/get_reward", "/nope"), request(["1"]))
    assert code == 404


@pytest.mark.parametrize(
    "q, p, expected",
    [
        ("PROMPT answer", "PROMPT ", "answer"),
        ("xx PROMPT answer", "PROMPT", " answer"),
        ("PROMPx answer", "PROMPT", "x answer"),
    ],
)
def test_response_text(q, p, expected):
    assert response_text(q, p) == expected


def test_labels_that_are_numbers_still_work(serve):
    url, _ = serve(mode="rule")
    code, out = post(url, request(["\\boxed{4}", "\\boxed{2.5}", "\\boxed{3}"], labels=[4, 2.5, "#### 4"]))
    assert code == 200 and out["rewards"] == [1.0, 1.0, 0.0]


def _raw_exchange(port, data: bytes) -> tuple[int, dict]:
    """Send raw bytes, read the reply to the end (the server closes), parse status and JSON."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        reply = b""
        for _ in range(1000):  # bounded: the server closes after an error
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"application/json" in head, reply[:300]
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize(
    "data, status",
    [
        (b"GARBAGE\r\n\r\n", 400),  # not a request line
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 x y\r\n\r\n", 400),  # TLS hello, or near it
        (b"POST /get_reward HTTP/9.9\r\n\r\n", 505),
        (b"PUT /get_reward HTTP/1.1\r\nHost: x\r\n\r\n", 501),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n", 411),  # a digit, not ASCII
    ],
)
def test_protocol_errors_are_json_too(serve, data, status):
    url, _ = serve()
    port = int(url.split(":")[2].split("/")[0])
    code, out = _raw_exchange(port, data)
    assert code == status and isinstance(out["error"], str) and len(out["error"]) <= 300
    assert post(url, request(["\\boxed{1}", "\\boxed{1}"]))[1]["rewards"] == [1.0, 1.0]  # still serving


@pytest.mark.parametrize(
    "argv",
    [
        ["--timeout", "0"],
        ["--workers", "0"],
        ["--group_size", "-1"],
        ["--port", "70000"],
        ["--request_timeout", "0"],
        ["--max_query_kb", "nan"],
        ["--max_waiting", "0"],
        ["--max_idle_per_client", "0"],
        ["--timeout", "inf"],
    ],
)
def test_cli_bad_arguments_exit_2(argv):
    assert cli_main(argv) == 2


def test_openrlhf_client_against_our_server(serve):
    """OpenRLHF 0.11's own HTTP reward client (one sample per request)."""
    agent = pytest.importorskip(
        "openrlhf.utils.agent", reason="openrlhf not installed (pip install --no-deps openrlhf)"
    )
    url, _ = serve(group_size=2, group_wait=30)
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=url)

    async def two_samples():
        return await asyncio.gather(
            executor._fetch_rewards_via_http([PROMPT + "\\boxed{12}"], [PROMPT], [None]),
            executor._fetch_rewards_via_http([PROMPT + "so 12"], [PROMPT], [None]),
        )

    first, second = asyncio.run(two_samples())
    assert first[0]["rewards"] == [1.0] and second[0]["rewards"] == [1.0]
    assert first[0]["extra_logs"]["group_n"] == [2]


# -- under real concurrency --------------------------------------------------


def _one_sample(port, prompt, text, new_connection=True):
    """POST one sample on a fresh connection; returns (seconds from connect to reply, rewards)."""
    import http.client
    import time

    body = json.dumps({"query": [prompt + text], "prompts": [prompt], "labels": [None]}).encode()
    t = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/get_reward", body=body, headers={"Content-Type": "application/json"})
    out = json.loads(conn.getresponse().read())
    conn.close()
    return time.perf_counter() - t, out["rewards"]


def test_64_clients_connecting_at_once_are_served_well_under_a_second(serve, checker):
    """The stdlib backlog of 5 made some of these wait for the kernel's 1 s SYN retry."""
    assert checker.healthy()  # pool warm: the timing is about the server
    url, service = serve(group_size=8, group_wait=30)
    port = int(url.split(":")[2].split("/")[0])
    n = 64
    prompts = [f"{PROMPT}Question {k // 8}" for k in range(n)]  # 8 groups of 8
    texts = ["\\boxed{7}" if k % 8 < 5 else f"\\boxed{{{100 + k}}}" for k in range(n)]  # 5 of 8 agree
    barrier = threading.Barrier(n)

    def client(k):
        barrier.wait(timeout=30)
        return _one_sample(port, prompts[k], texts[k])

    with ThreadPoolExecutor(n) as ex:
        results = list(ex.map(client, range(n)))
    assert [r for _, r in results] == [[1.0] if k % 8 < 5 else [0.0] for k in range(n)]
    slowest = max(t for t, _ in results)
    assert slowest < 0.5, f"slowest request took {slowest:.2f} s"
    assert service.counts["groups"] == 8 and service.counts["partial_groups"] == 0


def test_keep_alive_replies_do_not_wait_for_delayed_acks(serve):
    """One connection, 20 requests in a row: each reply leaves in one write with
    TCP_NODELAY, so none waits ~40 ms for the client's delayed ACK."""
    import http.client
    import statistics
    import time

    url, _ = serve()
    port = int(url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    body = json.dumps(request(["\\boxed{3}", "\\boxed{3}", "\\boxed{4}"])).encode()
    times, socks = [], set()
    for _ in range(20):
        t = time.perf_counter()
        conn.request("POST", "/get_reward", body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        assert json.loads(r.read())["rewards"] == [1.0, 1.0, 0.0]
        times.append(time.perf_counter() - t)
        socks.add(id(conn.sock))
    conn.close()
    assert len(socks) == 1  # the connection was kept alive
    assert statistics.median(times) < 0.03, times


def test_connections_past_the_bound_get_503_and_idle_ones_are_closed(checker):
    import socket
    import time

    server = make_server(RewardService(checker), "127.0.0.1", 0, max_connections=2, idle_timeout=1.0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    try:
        busy = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        for s in busy:  # mid-request: these slots cannot be taken back
            s.sendall(b"POST /get_reward HTTP/1.1\r\n")
        time.sleep(0.2)  # both accepted, each holding its thread
        third = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert third.recv(4096).startswith(b"HTTP/1.1 503")
        third.close()
        assert server.refused == 1
        for s in busy:  # closed by the server after idle_timeout
            assert s.recv(1) == b""
            s.close()
        time.sleep(0.2)
        status, out = post(f"http://127.0.0.1:{port}/get_reward", request(["\\boxed{1}"]))
        assert status == 200 and out["rewards"] == [1.0]
    finally:
        server.shutdown()
        server.server_close()


def test_expect_100_continue_is_answered_at_once(serve):
    import socket

    url, _ = serve()
    port = int(url.split(":")[2].split("/")[0])
    body = json.dumps(request(["\\boxed{5}"])).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=0.5)  # curl would wait 1 s
    s.sendall(
        b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    assert s.recv(4096).startswith(b"HTTP/1.1 100")
    s.sendall(body)
    reply = b""
    for _ in range(100):  # bounded: a closed socket returns b"" at once
        chunk = s.recv(4096)
        reply += chunk
        if not chunk or b"rewards" in reply:
            break
    assert reply.startswith(b"HTTP/1.1 200") and b"rewards" in reply
    s.close()


def test_a_client_trickling_bytes_loses_its_slot_at_the_request_deadline(checker):
    """Slowloris: one byte every 0.25 s never trips the 2 s per-read timeout, so only the
    1 s per-request deadline can free the single slot it holds."""
    import select
    import socket
    import time

    server = make_server(
        RewardService(checker), "127.0.0.1", 0, max_connections=1, idle_timeout=2.0, request_timeout=1.0
    )
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    url = f"http://127.0.0.1:{port}/get_reward"
    try:
        slow = socket.create_connection(("127.0.0.1", port), timeout=5)
        data = b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + b" " * 5000
        start = time.monotonic()
        slow.sendall(data[:1])
        time.sleep(0.2)
        assert post_at_capacity(url, request(["\\boxed{1}"]))[0] == 503  # the trickler holds the only slot
        reply = b""
        for k in range(1, 40):  # bounded: at most 10 s of trickling
            if select.select([slow], [], [], 0.25)[0]:
                chunk = slow.recv(4096)
                reply += chunk
                if not chunk:
                    break
                continue
            try:
                slow.sendall(data[k : k + 1])
            except OSError:  # closed under us: the reply is already in the buffer
                pass
        held = time.monotonic() - start
        slow.close()
        assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply
        assert 1.0 <= held < 2.0, held
        for _ in range(50):  # the slot is given back just after the close; bounded wait for it
            code, out = post_at_capacity(url, request(["\\boxed{1}"]))
            if code != 503:
                break
            time.sleep(0.02)
        assert code == 200 and out["rewards"] == [1.0]
    finally:
        server.shutdown()
        server.server_close()


def test_keep_alive_requests_each_get_their_own_deadline(checker):
    """The deadline is per request, not per connection: a connection that sends quick
    requests for longer than the deadline is never cut."""
    import http.client
    import time

    server = make_server(RewardService(checker), "127.0.0.1", 0, idle_timeout=2.0, request_timeout=0.5)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
        body = json.dumps(request(["\\boxed{3}", "\\boxed{3}"])).encode()
        for _ in range(4):
            conn.request("POST", "/get_reward", body=body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            assert r.status == 200 and json.loads(r.read())["rewards"] == [1.0, 1.0]
            time.sleep(0.3)  # 4 x 0.3 s on one connection: longer than one deadline
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
