"""The HTTP side of ``serl serve-reward``: handler, connection bound, request deadline.

What the scoring needs from HTTP is one JSON POST; everything here is about
serving that safely to clients that may be slow, broken or hostile:

* at most ``max_connections`` open connections, one thread each; past that the
  oldest idle connection is closed to make room, and only when every open one is
  mid-request does a newcomer get ``503`` at once; one client address keeps at most
  ``max_idle_per_client`` idle connections (see :class:`RewardHTTPServer`);
* exactly one ``Content-Length`` and no ``Transfer-Encoding``: two framings of one
  body are how requests are smuggled past a proxy, so they get ``400``;
* ``idle_timeout``: the longest wait for any one read, so a silent connection is
  closed;
* ``request_timeout``: the whole request (request line, headers and body) must
  arrive within this many seconds of its first byte.  A per-read timeout alone
  cannot stop a client that sends one byte just before each read would time out
  (slowloris): it held its slot for as long as it liked.  Past the deadline the
  client gets ``408`` and the connection is closed, which frees the slot.  The
  deadline is checked before every read of the socket, and each read waits at
  most until the deadline;
* every error, including the ones the standard library answers itself (a
  garbage request line, an unknown method, headers too long), is JSON
  ``{"error": ...}``, never an HTML page.
"""

from __future__ import annotations

import io
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class BadRequest(ValueError):
    """A request the server refuses; ``status`` is the HTTP code (4xx, or 500)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


class RequestTimeout(Exception):
    """The request did not arrive in full before its deadline (not a TimeoutError on
    purpose: the standard handler swallows those and closes without a reply)."""


class DeadlineReader(io.RawIOBase):
    """Reads from a socket, each read bounded by the idle timeout and by the deadline
    of the current request (which starts at that request's first byte)."""

    def __init__(self, sock: socket.socket, idle_timeout: float, request_timeout: float, on_first_byte=None):
        self.sock, self.idle, self.limit = sock, idle_timeout, request_timeout
        self.on_first_byte = on_first_byte
        self.deadline: float | None = None

    def readable(self) -> bool:
        return True

    def start_request(self) -> None:
        self.deadline = None

    def end_request(self) -> None:
        """The request has been read: the reply's writes wait up to the idle timeout."""
        self.deadline = None
        self.sock.settimeout(self.idle)

    def readinto(self, buf) -> int:
        wait = self.idle
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise RequestTimeout()
            wait = min(wait, left)
        self.sock.settimeout(wait)
        try:
            n = self.sock.recv_into(buf)
        except TimeoutError:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                raise RequestTimeout() from None
            raise  # idle: the standard handler closes the connection
        if n and self.deadline is None:
            self.deadline = time.monotonic() + self.limit
            if self.on_first_byte is not None:
                self.on_first_byte()
        return n


_DRAIN_CAP = 64 << 20  # bytes of an oversized body read and dropped before the 413


class RewardHandler(BaseHTTPRequestHandler):
    """The reward server's HTTP side; ``make_handler`` sets what it serves (class attributes)."""

    server_version = "serl-reward/1"
    protocol_version = "HTTP/1.1"  # keep-alive
    answer = health = None  # staticmethods: body -> reply dict, () -> the GET reply
    max_bytes = 0
    timeout = 0.0  # idle seconds between requests (socketserver's name)
    request_timeout = 0.0  # seconds for a whole request from its first byte
    wbufsize = 1 << 16  # headers and body go out in one write (flushed per request)

    def setup(self):
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()
        self.rfile.close()  # the standard reader: replaced by one that keeps the deadline
        track = getattr(self.server, "track", None)
        active = (lambda: track(self.connection, False)) if track else None
        self.reader = DeadlineReader(self.connection, self.timeout, self.request_timeout, active)
        self.rfile = io.BufferedReader(self.reader, 1 << 16)

    def handle_one_request(self):
        self.reader.start_request()
        if getattr(self.server, "track", None):
            self.server.track(self.connection, True)  # idle until the next request's first byte
        # what a reply needs if the deadline passes before the request line is in
        self.command, self.requestline, self.request_version = "", "", "HTTP/1.1"
        try:
            super().handle_one_request()
        except RequestTimeout:
            self.close_connection = True
            self.reader.end_request()
            self._send(
                408,
                {
                    "error": f"request not complete within {self.request_timeout:g} s of its "
                    f"first byte (--request_timeout); connection closed"
                },
            )
            self.wfile.flush()

    def parse_request(self):
        if getattr(self.server, "track", None):  # a pipelined request arrives with no new read
            self.server.track(self.connection, False)
        return super().parse_request()

    def log_message(self, fmt, *args):  # quiet by default
        pass

    def send_error(self, code, message=None, explain=None):
        """The standard library's own refusals, as JSON like every other error."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # a garbled request line: still answer in HTTP/1.1
            self.request_version = "HTTP/1.1"
        phrase = self.responses.get(code, ("error",))[0]
        self._send(code, {"error": (message or phrase)[:300]})

    def handle_expect_100(self):
        ok = super().handle_expect_100()
        self.wfile.flush()  # the client waits for this line before it sends the body
        return ok

    def _send(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _discard(self, n: int) -> None:
        # Read (and drop) a rejected body so the client sees the 413 instead
        # of a broken pipe; past the cap we just close, bounding the work.
        n = min(n, _DRAIN_CAP)
        while n > 0:
            chunk = self.rfile.read(min(n, 1 << 16))
            if not chunk:
                return
            n -= len(chunk)

    def do_GET(self):
        self.reader.end_request()
        if self.path.rstrip("/") in ("/health", ""):
            state = self.health()
            self._send(200 if state.get("ok", True) else 503, state)  # 503: a load balancer sees it
        else:
            self._send(404, {"error": f"no such path {self.path[:200]!r}; POST /get_reward"})

    def do_POST(self):
        if self.path.rstrip("/") not in ("", "/get_reward"):
            self.close_connection = True  # the body is not read
            self._send(404, {"error": f"no such path {self.path[:200]!r}; POST /get_reward"})
            return
        if len(self.headers.get_all("Content-Length", [])) > 1 or "Transfer-Encoding" in self.headers:
            # two lengths (or a chunked body besides one): which one frames the body is ambiguous,
            # the classic request-smuggling setup behind a proxy
            self.close_connection = True
            self._send(400, {"error": "exactly one Content-Length header and no Transfer-Encoding are accepted"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not (length.isascii() and length.isdigit()):
            self.close_connection = True
            self._send(411, {"error": "Content-Length header required (a decimal number of bytes)"})
            return
        if int(length) > self.max_bytes:
            self.close_connection = True
            self._discard(int(length))
            self._send(413, {"error": f"body of {length} bytes exceeds the limit of {self.max_bytes}"})
            return
        body = self.rfile.read(int(length))
        self.reader.end_request()
        if len(body) < int(length):
            self.close_connection = True  # the client closed its side early: no one to answer
            return
        try:
            payload = self.answer(body)
        except BadRequest as e:
            self._send(e.status, {"error": str(e)})
            return
        except Exception as e:  # never let one request kill the server
            self._send(500, {"error": f"{type(e).__name__}: {e}"[:500]})
            return
        self._send(200, payload)


def make_handler(answer, health, max_bytes: int, idle_timeout: float, request_timeout: float):
    """A handler class. ``answer(body: bytes) -> dict`` scores a POST body and raises
    :class:`BadRequest` to refuse it; ``health() -> dict`` is the GET reply."""
    return type(
        "Handler",
        (RewardHandler,),
        {
            "answer": staticmethod(answer),
            "health": staticmethod(health),
            "max_bytes": max_bytes,
            "timeout": idle_timeout,
            "request_timeout": request_timeout,
        },
    )


_BUSY_BODY = b'{"error": "too many open connections; retry in a moment"}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY)
)


class _Conn:
    __slots__ = ("sock", "ip", "idle_since", "evicted")

    def __init__(self, sock, ip):
        self.sock, self.ip, self.idle_since, self.evicted = sock, ip, time.monotonic(), False


class RewardHTTPServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` with a listen backlog and a bound on open connections.

    Idle connections (no request in progress: a fresh one before its first byte,
    or a kept-alive one between requests) are cheap to give up, so they never
    shut others out: past ``max_idle_per_client`` idle connections from one
    address its oldest idle one is closed, and when every slot is taken a new
    connection closes the oldest idle one instead of getting ``503``.  Only
    when every open connection is mid-request is a newcomer refused."""

    daemon_threads = True
    block_on_close = False  # no bookkeeping of finished threads

    def __init__(
        self, address, handler, backlog: int = 1024, max_connections: int = 1024, max_idle_per_client: int = 128
    ):
        self.request_queue_size = backlog  # read by listen() in the base constructor
        self.max_connections, self.max_idle_per_client = max_connections, max_idle_per_client
        self._conns: dict[socket.socket, _Conn] = {}
        self._idle_by_ip: dict[str, int] = {}
        self._live = 0  # open connections not yet told to close
        self._conn_lock = threading.Lock()
        self.refused = self.evicted = 0
        super().__init__(address, handler)

    def _set_idle(self, conn: _Conn, idle: bool) -> None:
        """Mark a connection idle or busy (under the lock), keeping the per-address count."""
        if (conn.idle_since is not None) == idle:
            return
        conn.idle_since = time.monotonic() if idle else None
        self._idle_by_ip[conn.ip] = self._idle_by_ip.get(conn.ip, 0) + (1 if idle else -1)

    def _evict(self, conn: _Conn) -> None:
        """Close an idle connection (under the lock): its thread's read returns at once."""
        self._set_idle(conn, False)
        conn.evicted = True
        self._live -= 1
        self.evicted += 1
        try:
            conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def track(self, sock, idle: bool) -> None:
        """The handler says a connection went idle (True) or got a request's first byte."""
        with self._conn_lock:
            conn = self._conns.get(sock)
            if conn is None or conn.evicted:
                return
            self._set_idle(conn, idle)
            if idle and self._idle_by_ip[conn.ip] > self.max_idle_per_client:
                same = [c for c in self._conns.values() if c.ip == conn.ip and c.idle_since is not None]
                self._evict(min(same, key=lambda c: c.idle_since))

    def process_request(self, request, client_address):
        with self._conn_lock:
            if self._live >= self.max_connections:
                idle = [c for c in self._conns.values() if c.idle_since is not None]
                if idle:
                    self._evict(min(idle, key=lambda c: c.idle_since))
            admit = self._live < self.max_connections
            if admit:
                conn = self._conns[request] = _Conn(request, client_address[0] if client_address else "")
                conn.idle_since = None
                self._set_idle(conn, True)  # idle until its first byte
                self._live += 1
                if self._idle_by_ip[conn.ip] > self.max_idle_per_client:
                    same = [c for c in self._conns.values() if c.ip == conn.ip and c.idle_since is not None]
                    self._evict(min(same, key=lambda c: c.idle_since))
        if not admit:
            self.refused += 1
            try:
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started
            self._forget(request)
            self.shutdown_request(request)

    def _forget(self, request) -> None:
        with self._conn_lock:
            conn = self._conns.pop(request, None)
            if conn is not None and not conn.evicted:
                self._set_idle(conn, False)
                self._live -= 1

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._forget(request)

    def open_connections(self) -> dict:
        with self._conn_lock:
            idle = sum(c.idle_since is not None for c in self._conns.values())
            return {"open": self._live, "idle": idle, "refused": self.refused, "evicted": self.evicted}

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a client going away is normal
            super().handle_error(request, client_address)
