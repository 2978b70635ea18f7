"""``serl serve-reward``'s command line: options, their checks, and serving until Ctrl-C or
SIGTERM. The protocol and the service are :mod:`serl.rewards.server`."""

from __future__ import annotations

import argparse
import math
import signal
import sys

from serl.rewards import server as _server
from serl.rewards.equivalence import EquivalenceChecker
from serl.rewards.extract import FALLBACKS
from serl.rewards.lanes import Lanes
from serl.rewards.vote import MODES


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="serl serve-reward",
        description=(_server.__doc__ or "").split("\n\n")[0],
        epilog="An answer with nothing in it (\\boxed{}, \\boxed{\\text{}}, \\boxed{.}, \\boxed{$$}) is no "
        "answer: reward 0, never the majority, never equal to a label. Labels are strings, finite "
        'numbers or null. Errors are JSON {"error": ...} with a 4xx status.',
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=5000, help="port (0 = pick a free one)")
    p.add_argument(
        "--mode",
        choices=MODES,
        default="majority",
        help="majority: vote, ignore labels; rule: compare with labels; auto: rule where labelled",
    )
    p.add_argument(
        "--fallback",
        choices=FALLBACKS,
        default="number",
        help="answer when a response has no \\boxed{}: none, last number, or choice letter A-J",
    )
    p.add_argument(
        "--group_size",
        type=int,
        default=0,
        help="0: vote per request; N: collect N samples of a prompt across requests, then vote",
    )
    p.add_argument(
        "--group_wait",
        type=float,
        default=60.0,
        help="seconds to wait for a group to fill before voting on what arrived",
    )
    p.add_argument("--timeout", type=float, default=3.0, help="hard time limit of one equivalence check (s)")
    p.add_argument(
        "--workers",
        type=int,
        default=2,
        help="math-verify worker processes of the fast lane; the slow lane for big requests has "
        "half as many (at least 1), so one big request leaves CPU for the small ones",
    )
    p.add_argument("--max_request_mb", type=float, default=8.0, help="largest request body accepted (MiB)")
    p.add_argument(
        "--backlog",
        type=int,
        default=1024,
        help="listen backlog: connections the kernel queues before accept (the OS may cap it)",
    )
    p.add_argument(
        "--max_connections",
        type=int,
        default=1024,
        help="open connections served at once (one thread each); more get 503",
    )
    p.add_argument(
        "--idle_timeout",
        type=float,
        default=60.0,
        help="seconds one read may wait: an idle or silent connection is closed after this (default 60)",
    )
    p.add_argument(
        "--request_timeout",
        type=float,
        default=30.0,
        help="seconds a request (request line, headers and body) may take to arrive, from its "
        "first byte; past it the client gets 408 and its connection is closed, freeing the "
        "slot (stops clients that trickle bytes). Default 30; raise it for large bodies on slow links",
    )
    p.add_argument(
        "--max_query_kb",
        type=float,
        default=256.0,
        help="longest query or prompt text accepted, in KiB of characters; longer gets 413 before any "
        "text is read (default 256: far above any model response)",
    )
    p.add_argument(
        "--max_idle_per_client",
        type=int,
        default=128,
        help="idle connections kept open per client address; past it that client's oldest idle one "
        "is closed. When every slot is taken, a new connection closes the oldest idle one",
    )
    p.add_argument(
        "--max_waiting",
        type=int,
        default=512,
        help="samples held waiting for their group (--group_size) to fill; past it the oldest "
        "incomplete groups are voted at once (partial_group = 1) to free their connections",
    )
    p.add_argument(
        "--max_samples", type=int, default=4096, help="samples one request may carry; more get 413 (default 4096)"
    )
    p.add_argument(
        "--max_distinct",
        type=int,
        default=256,
        help="distinct answers (after the cheap normal form) one prompt's group may have; a vote "
        "costs up to k^2/2 checks for k of them, so more get 413 (default 256; >= --group_size)",
    )
    p.add_argument(
        "--max_score_seconds",
        type=float,
        default=60.0,
        help="seconds the worker pool may spend on one request's groups; past it the request "
        "gets 503 and the workers restart, so other clients are served. /health reports "
        "ok: false while some scoring has run longer than this (default 60)",
    )
    return p


def _stop_on_sigterm(signum, frame):
    raise KeyboardInterrupt  # leaves serve_forever through cli_main's finally: workers are ended


def cli_main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in (
        "timeout",
        "group_wait",
        "max_request_mb",
        "idle_timeout",
        "request_timeout",
        "max_score_seconds",
        "max_query_kb",
    ):
        if not (math.isfinite(getattr(args, name)) and getattr(args, name) > 0):
            print(f"serl serve-reward: error: --{name} must be a finite number > 0", file=sys.stderr)
            return 2
    if args.max_idle_per_client < 1 or args.max_waiting < max(1, args.group_size):
        print(
            "serl serve-reward: error: --max_idle_per_client >= 1 and --max_waiting >= max(1, --group_size)",
            file=sys.stderr,
        )
        return 2
    if (
        args.workers < 1
        or args.group_size < 0
        or not (0 <= args.port < 65536)
        or args.backlog < 1
        or args.max_connections < 1
        or args.max_samples < 1
        or args.max_distinct < max(1, args.group_size)
    ):
        print(
            "serl serve-reward: error: --workers >= 1, --group_size >= 0, 0 <= --port < 65536, "
            "--backlog >= 1, --max_connections >= 1, --max_samples >= 1, --max_distinct >= max(1, --group_size)",
            file=sys.stderr,
        )
        return 2
    # two pools: a big request is scored in the slow lane, never holding the workers small ones need;
    # half the workers there: with --workers 2 on 2 cores, two heavy requests in flight cut the load's
    # throughput to ~405 req/s with 2 slow workers, ~530-700 req/s with 1 (bench/README.md)
    checker = Lanes(
        EquivalenceChecker(timeout=args.timeout, workers=args.workers),
        EquivalenceChecker(timeout=args.timeout, workers=max(1, args.workers // 2)),
    )
    service = _server.RewardService(
        checker,
        args.mode,
        args.fallback,
        args.group_size,
        args.group_wait,
        max_samples=args.max_samples,
        max_distinct=args.max_distinct,
        max_score_seconds=args.max_score_seconds,
        max_query_chars=int(args.max_query_kb * 1024),
        max_waiting=args.max_waiting,
    )
    try:
        server = _server.make_server(
            service,
            args.host,
            args.port,
            args.max_request_mb,
            backlog=args.backlog,
            max_connections=args.max_connections,
            idle_timeout=args.idle_timeout,
            request_timeout=args.request_timeout,
            max_idle_per_client=args.max_idle_per_client,
        )
    except OSError as e:
        print(f"serl serve-reward: error: cannot bind {args.host}:{args.port}: {e}", file=sys.stderr)
        checker.close()
        return 2
    host, port = str(server.server_address[0]), server.server_address[1]
    print(
        f"serl serve-reward: POST http://{host}:{port}/get_reward (mode={args.mode}, group_size={args.group_size})",
        flush=True,
    )
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
        checker.terminate()  # not close(): that would wait for a batch in flight
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main())
