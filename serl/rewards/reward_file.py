"""A user's OpenRLHF reward file (``reward_func(queries, prompts, labels)``) with a time limit.

The file is loaded once, in a worker process of its own, and each call runs there. Why a
process: a call that runs past ``--remote_rm_timeout`` must be stopped, and a thread cannot
be stopped (nor can a signal interrupt a loop inside C code). The parent waits for the
reply up to the limit; when it does not come, the worker and everything it started are
killed and the step fails with ``RemoteRewardError`` naming the file and the function.
OpenRLHF itself sets no limit (it calls ``reward_func`` directly or as a Ray task and waits),
so there is no "reward on timeout" value to follow; a stopped call fails the step, as a
reward server that stays down does, and nothing is trained on the missing rewards.

The worker keeps the module's globals between calls, as an in-process load would. It runs
in its own process group (so a kill also reaches the processes the file started, e.g. a
math-verify pool) and is not a daemon (so the file may start processes of its own).
A process that leaves the group (``setsid``, as daemons do) is still ended with the run:
the worker is a child subreaper (Linux ``PR_SET_CHILD_SUBREAPER``), so even a double-forked
daemon stays its descendant, and every descendant is killed by pid when the worker is
stopped, or by the worker itself when it finds its parent gone.
Model output reaches the file as text; nothing here evaluates it.
"""

from __future__ import annotations

import atexit
import importlib.util
import multiprocessing as mp
import os
import signal
import traceback
from pathlib import Path
from typing import Any

from serl.rewards.remote_reply import RemoteRewardError, Reply, logs_of, rewards_of

LOAD_LIMIT_S = 120.0  # loading may import torch and friends; never less than the call limit


def _where(path: Path, e: BaseException) -> str:
    """``file:line`` of the deepest frame in the reward file (else the deepest frame)."""
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if Path(f.filename).resolve() == path]
    deepest = mine or frames
    return f"{deepest[-1].filename}:{deepest[-1].lineno}" if deepest else str(path)


def _plain(value):
    """Tensors and arrays as lists, so the reply pickles without torch or numpy types."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _load(path: Path, shown: str):
    """The file's ``reward_func``, or the text of why it cannot be had."""
    name = f"serl_user_reward_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        return None, f"{shown}: cannot be loaded as a Python file"
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        return None, f"{e.filename or shown}:{e.lineno}: syntax error in the reward file ({e.msg})"
    except BaseException as e:  # SystemExit too: the file must not end the worker silently
        return None, f"{_where(path, e)}: loading the reward file raised {type(e).__name__}: {str(e)[:300]}"
    func = getattr(module, "reward_func", None)
    if not callable(func):
        return None, f"{shown}: defines no reward_func(queries, prompts, labels)"
    return func, None


def _subreaper() -> None:
    """Orphans of this process's descendants become its children, not init's (Linux only)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc; [] where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for d in names:
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _end_descendants() -> None:
    for _ in range(3):  # a fork between the look and the kill: look again
        kids = descendants(os.getpid())
        if not kids:
            return
        _kill(kids)
        for pid in kids:  # reap them: the subreaper is their parent now
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _worker_main(conn, path: str, shown: str) -> None:
    """Process target: load the file, say so, then answer one message per call."""
    os.setpgrp()  # one process group: a kill on timeout reaches what the file started
    _subreaper()  # and what left the group (setsid) stays our descendant
    try:
        _serve(conn, path, shown)
    finally:
        _end_descendants()  # the parent is gone or asked us to stop: nothing we started stays


def _serve(conn, path: str, shown: str) -> None:
    p = Path(path)
    func, why = _load(p, shown)
    conn.send(("error", why) if why else ("ready", None))
    if why:
        return
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if job is None:
            return
        try:
            reply = ("ok", _plain(func(*job)))
        except BaseException as e:
            reply = ("error", f"{_where(p, e)}: reward_func raised {type(e).__name__}: {str(e)[:300]}")
        try:
            conn.send(reply)
        except (OSError, EOFError):  # the parent is gone
            return
        except Exception as e:  # an object that does not pickle
            conn.send(
                (
                    "error",
                    f"{shown}: reward_func returned what cannot be sent back ({type(e).__name__}: {str(e)[:200]})",
                )
            )


class FileReward:
    """A reward file with OpenRLHF's ``reward_func``, run in a worker; each call may take at
    most ``timeout`` seconds."""

    def __init__(self, path: str, timeout: float = 60.0):
        from serl.rewards.worker_slot import start_without_main

        self.path, self.shown, self.timeout = Path(path).resolve(), str(path), float(timeout)
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc: Any = ctx.Process(
            target=_worker_main, args=(child, str(self.path), self.shown), name="serl-reward-file", daemon=False
        )
        start_without_main(self.proc)  # the child needs nothing from the parent's __main__
        child.close()
        atexit.register(self.close)
        limit = max(LOAD_LIMIT_S, self.timeout)
        kind, why = self._reply(limit)
        if kind is None:
            self.close()
            raise RemoteRewardError(
                f"{self.shown}: loading the reward file took longer than {limit:g} s; it was stopped"
            )
        if kind != "ready":
            self.close()
            raise RemoteRewardError(why)

    def _reply(self, limit: float):
        """The worker's next message, ("died", text) if it ended, or (None, None) after ``limit`` s."""
        try:
            if not self.conn.poll(limit):
                return None, None
            return self.conn.recv()
        except (EOFError, OSError):  # the worker ended (os._exit, a crash, a kill from outside)
            self.proc.join(5)
            return "died", f"{self.shown}: the reward file's process ended (exit code {self.proc.exitcode})"

    def rewards(self, queries, prompts, labels):
        if self.proc is None:
            raise RemoteRewardError(f"{self.shown}: the reward file's process was stopped earlier in this run")
        n = len(queries)
        self.conn.send((list(queries), list(prompts), list(labels)))
        kind, out = self._reply(self.timeout)
        if kind is None:
            self.close()
            raise RemoteRewardError(
                f"{self.shown}: reward_func did not return within {self.timeout:g} s (--remote_rm_timeout) "
                f"on {n} samples; it was stopped and the step was not trained. Make it faster, give it more "
                f"time (--remote_rm_timeout) or fewer samples per call (--remote_rm_batch_size)"
            )
        if kind == "died":
            self.close()
        if kind != "ok":  # an exception in reward_func leaves the worker (and its state) as it was
            raise RemoteRewardError(out)
        where = f"{self.shown}: reward_func"
        if isinstance(out, dict):
            if "rewards" not in out:
                raise RemoteRewardError(f"{where} returned a dict without 'rewards'")
            return Reply(rewards_of(out["rewards"], n, where), logs_of(out.get("extra_logs"), n, where))
        return Reply(rewards_of(out, n, where), {})

    def close(self) -> None:
        """Stop the worker (a kill of its process group: nothing it started stays behind)."""
        proc, self.proc = getattr(self, "proc", None), None
        if proc is None:
            return
        atexit.unregister(self.close)
        if proc.is_alive():
            kids = descendants(proc.pid)  # while the worker lives, orphans that left the group are its own
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
            _kill(kids)
            _kill(descendants(proc.pid))  # forked meanwhile (the worker is a zombie until joined)
        proc.join(5)
        self.conn.close()
