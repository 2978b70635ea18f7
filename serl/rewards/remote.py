"""``--remote_rm_url``: rewards from an OpenRLHF-protocol endpoint or a user's reward file.

Two kinds of source, one interface (``RewardSource.rewards(queries, prompts, labels)``):

* ``http://HOST:PORT/PATH`` (or https): one POST per batch of JSON
  ``{"query": [prompt + response, ...], "prompts": [...], "labels": [label | null, ...]}``;
  the reply must hold ``"rewards"``, one finite number per sample, and may hold
  ``"extra_logs"`` (``serl serve-reward`` sends ``agreement``, ``n_clusters``, ``tie`` and
  ``no_answer``). This is the request OpenRLHF's ``remote_rm_utils`` sends
  (github.com/OpenRLHF/OpenRLHF, ``openrlhf/utils/remote_rm_utils.py``).
* ``path/to/file.py``: a Python file with OpenRLHF's
  ``reward_func(queries, prompts, labels)``, loaded once, in a worker process of its own
  (serl.rewards.reward_file). It may return a dict with ``"rewards"`` (a list or a tensor),
  or the rewards themselves.

A batch never splits a prompt's group, so a majority vote on the far side sees whole
groups. Each request, and each call of a file's ``reward_func``, has a deadline
(``--remote_rm_timeout``, the whole reply included). A failed try of a URL (no connection,
a timeout, a 5xx, a reply that is not the protocol) is retried ``--remote_rm_retries``
times with doubling back-off, and then the step fails with ``RemoteRewardError``, naming
the URL (without any credentials or query string); a ``reward_func`` call past its deadline
is stopped and fails the step at once, naming the file and the function. No step trains on
a reward that did not arrive, and no checkpoint is written for it; the runner adds the
newest checkpoint to the message (``serl.run.checkpoint.resume_hint``). A 4xx is not retried (the
request itself is wrong). An exception in a reward file is reported with the file and line
where it was raised. Model output is sent as text and never evaluated here.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.parse
from pathlib import Path

from serl.rewards.remote_reply import RemoteRewardError, Reply, logs_of, rewards_of  # noqa: F401 (API)
from serl.rewards.reward_file import FileReward

MAX_REPLY_BYTES = 64 * 2**20
# query keys that hold credentials (api_key=, token=, access_token=, sig=, ...)
_SECRET_KEY = re.compile(r"key|token|secret|passw|auth|sig|credential", re.IGNORECASE)
MAX_BACKOFF_S = 30.0
REWARD_UTILS = Path(__file__).resolve().parents[2] / "reward_utils"  # a checkout's reward files


def is_url(spec: str) -> bool:
    return spec.lower().startswith(("http://", "https://"))


def shown_url(url: str) -> str:
    """``url`` as it may appear in messages: scheme, host, port and path only."""
    u = urllib.parse.urlsplit(url)
    host = u.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{u.port}" if u.port else ""
    return f"{u.scheme}://{host}{port}{u.path}"


def check_spec(spec: str) -> str | None:
    """Why ``spec`` cannot be a ``--remote_rm_url`` (None when it can). Never echoes secrets."""
    if is_url(spec):
        u = urllib.parse.urlsplit(spec)
        if u.username is not None or u.password is not None:
            return (
                "a URL with user:password@ is refused (it would be saved in config.yaml); serve the "
                "reward without credentials on a trusted network, or use a reward file"
            )
        keys = [k for k, _ in urllib.parse.parse_qsl(u.query, keep_blank_values=True)]
        secret = next((k for k in keys if _SECRET_KEY.search(k)), None)
        if secret is not None:  # the key's name only, never its value
            return (
                f"a URL whose query carries a credential ({secret!r}) is refused (it would be saved in "
                f"config.yaml); serve the reward without credentials on a trusted network, or use a reward file"
            )
        try:
            u.port  # noqa: B018 (reading it checks the port)
        except ValueError:
            return f"bad port in {shown_url(spec.split('@')[-1])!r}"
        return None if u.hostname else "the URL has no host"
    if "," in spec:  # SeRL passes two files, comma-separated
        return (
            f"serl takes one reward source, got {len(spec.split(','))} ({spec}); serl's evaluation "
            f"(--eval_data) always scores with its built-in math-verify rule check, the reward of "
            f"reward_utils/math_verify_reward.py: pass the training reward alone"
        )
    if not spec.endswith(".py"):
        return f"expected an http(s):// URL or a .py file with reward_func, got {spec!r}"
    if not Path(spec).is_file():
        return f"reward file not found: {spec}{_shipped_hint(Path(spec).name)}"
    return None


def _shipped_hint(name: str) -> str:
    """Where serl's own reward files are (a path from SeRL's README names one of them by its file name)."""
    if not REWARD_UTILS.is_dir():
        return ""
    files = sorted(p.name for p in REWARD_UTILS.glob("*.py") if p.name != "serl_reward_common.py")
    if name in files:
        return f"; serl ships it as {REWARD_UTILS / name}"
    return f"; serl's reward files, in {REWARD_UTILS}: {', '.join(files)}"


class HttpReward:
    """OpenRLHF's remote reward protocol over HTTP, with deadlines and bounded retries."""

    def __init__(self, url: str, timeout: float = 60.0, retries: int = 3, backoff: float = 0.5):
        self.url, self.shown = url, shown_url(url)
        u = urllib.parse.urlsplit(url)
        self.https, self.host, self.port = u.scheme.lower() == "https", u.hostname, u.port
        self.path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.requests = 0

    def rewards(self, queries, prompts, labels) -> Reply:
        body = json.dumps({"query": list(queries), "prompts": list(prompts), "labels": list(labels)}).encode()
        last, down, t0 = "", False, time.monotonic()
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S))
            try:
                status, data = self._post(body)
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timed out, ...
                last, down = f"{type(e).__name__}: {e}", True
                continue
            down = False
            self.requests += 1
            if 400 <= status < 500:
                raise RemoteRewardError(
                    f"remote reward {self.shown} refused the request with HTTP {status}{_error_text(data)}; not retried"
                )
            if status != 200:
                last = f"HTTP {status}{_error_text(data)}"
                continue
            try:
                reply = json.loads(data)
                if not isinstance(reply, dict) or "rewards" not in reply:
                    raise ValueError("no 'rewards' in the reply")
                return Reply(
                    rewards_of(reply["rewards"], len(queries), f"remote reward {self.shown}"),
                    logs_of(reply.get("extra_logs"), len(queries), f"remote reward {self.shown}"),
                )
            except (ValueError, RecursionError) as e:
                last = f"reply is not the reward protocol ({str(e)[:200]})"
        # one line: the runner adds the checkpoint to resume from (serl.run.checkpoint.resume_hint)
        what = (
            "The server is down or not answering: restart it"
            if down
            else "The server answers but gives no rewards: see its log, fix or restart it"
        )
        raise RemoteRewardError(
            f"remote reward {self.shown}: no rewards after {self.retries + 1} tries over "
            f"{time.monotonic() - t0:.1f} s (last: {last}); the step was not trained. {what} "
            f"(e.g. `serl serve-reward --port {self.port or 'PORT'}`)"
        )

    def _post(self, body: bytes) -> tuple[int, bytes]:
        """One POST; the whole exchange must finish within ``timeout`` seconds."""
        deadline = time.monotonic() + self.timeout
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host or "", self.port, timeout=self.timeout)  # the spec was checked to name a host
        try:
            conn.request("POST", self.path, body, {"Content-Type": "application/json"})
            sock = conn.sock  # the response keeps it when the server closes the connection
            resp = conn.getresponse()
            chunks, size = [], 0
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"reply not complete within {self.timeout:g} s")
                sock.settimeout(left)
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise http.client.HTTPException(f"reply larger than {MAX_REPLY_BYTES >> 20} MiB")
                chunks.append(chunk)
            return resp.status, b"".join(chunks)
        finally:
            conn.close()


def _error_text(data: bytes) -> str:
    try:
        msg = json.loads(data).get("error")
    except (ValueError, AttributeError, RecursionError):
        return ""
    return f" ({str(msg)[:200]})" if msg else ""


_SOURCES: dict[tuple, object] = {}


def source_for(cfg):
    """The reward source of ``cfg.remote_rm_url`` (one per process: a file is loaded once)."""
    key = (cfg.remote_rm_url, cfg.remote_rm_timeout, cfg.remote_rm_retries)
    if key not in _SOURCES:
        spec = cfg.remote_rm_url
        _SOURCES[key] = (
            HttpReward(spec, cfg.remote_rm_timeout, cfg.remote_rm_retries)
            if is_url(spec)
            else FileReward(spec, cfg.remote_rm_timeout)
        )
    return _SOURCES[key]


def load_source(cfg) -> None:
    """Load ``--remote_rm_url``'s reward file now (a recipe's ``prepare``): a broken file is a
    ConfigError (exit 2) before anything is written. A URL is not contacted here."""
    if getattr(cfg, "remote_rm_url", "") and not is_url(cfg.remote_rm_url):
        from serl import ConfigError

        try:
            source_for(cfg)
        except RemoteRewardError as e:
            raise ConfigError(f"remote_rm_url: {e}") from None


def batches(sizes: list[int], limit: int) -> list[range]:
    """Consecutive runs of groups whose samples add up to at most ``limit`` (0 = one batch);
    a group larger than ``limit`` goes alone. Groups are never split."""
    if not limit:
        return [range(len(sizes))] if sizes else []
    out, start, total = [], 0, 0
    for i, n in enumerate(sizes):
        if total and total + n > limit:
            out.append(range(start, i))
            start, total = i, 0
        total += n
    if start < len(sizes):
        out.append(range(start, len(sizes)))
    return out


def score_remote(
    source, prompts: list[str], responses: list[list[str]], labels: list, fallback: str = "number", batch_size: int = 0
) -> list:
    """``GroupScore`` per group from ``source``. ``prompts``: one text per group (the chat
    prompt as the model saw it); the query of a sample is prompt + response.

    A group's ``agreement`` (what SeRL's difficulty filter reads) is its mean reward: for
    a majority vote that is the majority's share, for a rule reward the accuracy, as the
    built-in reward has it."""
    from serl.rewards.extract import extract_answer
    from serl.rewards.vote import GroupScore

    out = []
    for part in batches([len(g) for g in responses], batch_size):
        q, p, lab = [], [], []
        for gi in part:
            for r in responses[gi]:
                q.append(prompts[gi] + r)
                p.append(prompts[gi])
                lab.append(labels[gi])
        reply = source.rewards(q, p, lab)
        k = 0
        for gi in part:
            n = len(responses[gi])
            rew, logs = reply.rewards[k : k + n], {key: v[k : k + n] for key, v in reply.logs.items()}
            no_ans = [bool(x) for x in logs.get("no_answer", [0] * n)]
            answers = [None if no_ans[j] else (extract_answer(r, fallback) or r) for j, r in enumerate(responses[gi])]
            clusters = logs.get("n_clusters", [0] * n)
            out.append(
                GroupScore(
                    rewards=rew,
                    answers=answers,
                    label=None,
                    agreement=sum(rew) / n if n else 0.0,
                    n_clusters=int(clusters[0]) if n else 0,
                    n_no_answer=sum(no_ans),
                    tie=bool(logs.get("tie", [0])[0]) if n else False,
                    source="remote",
                )
            )
            k += n
    return out


def score_for(cfg, checker, tokenizer, groups, labels):
    """The rewards of a recipe's rollout ``groups`` (lists of ``Completion``): the built-in
    reward (``--reward_mode``), or ``--remote_rm_url``'s. ``labels``: per group, or None."""
    from serl.rewards.vote import score_groups

    texts = [[c.text for c in g] for g in groups]
    url = getattr(cfg, "remote_rm_url", "")
    if not url:
        labels = labels if cfg.reward_mode != "majority" else None
        return score_groups(texts, labels, checker, mode=cfg.reward_mode, fallback=cfg.answer_fallback)
    prompts = [tokenizer.decode(g[0].prompt_ids, skip_special_tokens=False) if g else "" for g in groups]
    return score_remote(
        source_for(cfg),
        prompts,
        texts,
        list(labels or [None] * len(groups)),
        cfg.answer_fallback,
        cfg.remote_rm_batch_size,
    )
