"""A user's reward file under a time limit: real slow functions (sleeping, spinning, hanging
at load, starting a child process), stopped on time; the worker keeps the module's state."""

import os
import time

import pytest

from serl.rewards import reward_file
from serl.rewards.remote import RemoteRewardError
from serl.rewards.reward_file import FileReward


def _write(tmp_path, text, name="my_reward.py"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its parent counts as gone
        return f.read().split(")")[-1].split()[0] != "Z"


def _gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not _alive(pid)


def test_a_call_past_the_limit_is_stopped_naming_file_and_function(tmp_path):
    path = _write(
        tmp_path,
        "import time\n\ndef reward_func(queries, prompts, labels):\n"
        "    if queries[0] == 'slow':\n        time.sleep(60)\n"
        "    return [1.0] * len(queries)\n",
        "slow_reward.py",
    )
    src = FileReward(path, timeout=1.0)
    assert src.rewards(["fast"], [""], [None]).rewards == [1.0]
    pid = src.proc.pid
    t0 = time.monotonic()
    with pytest.raises(RemoteRewardError) as e:
        src.rewards(["slow", "x"], ["", ""], [None, None])
    took = time.monotonic() - t0
    assert 1.0 <= took < 10, took
    msg = str(e.value)
    assert f"{path}: reward_func did not return within 1 s (--remote_rm_timeout) on 2 samples" in msg
    assert "the step was not trained" in msg
    assert _gone(pid)
    with pytest.raises(RemoteRewardError, match="stopped earlier in this run"):
        src.rewards(["fast"], [""], [None])


def test_a_spinning_call_and_the_processes_it_started_are_stopped(tmp_path):
    # a pure-Python busy loop after starting a child process: both end at the limit
    pidfile = tmp_path / "child.pid"
    path = _write(
        tmp_path,
        "import subprocess\n\ndef reward_func(queries, prompts, labels):\n"
        "    child = subprocess.Popen(['sleep', '120'])\n"
        f"    open({str(pidfile)!r}, 'w').write(str(child.pid))\n"
        "    while True:\n        pass\n",
        "spin.py",
    )
    src = FileReward(path, timeout=1.5)
    worker = src.proc.pid
    with pytest.raises(RemoteRewardError, match=r"spin\.py: reward_func did not return within 1\.5 s"):
        src.rewards(["a"], [""], [None])
    child = int(pidfile.read_text())
    assert _gone(worker) and _gone(child)


def test_a_file_that_hangs_while_loading_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(reward_file, "LOAD_LIMIT_S", 1.0)
    path = _write(tmp_path, "import time\ntime.sleep(60)\n\ndef reward_func(q, p, l):\n    return [0.0]\n", "hang.py")
    t0 = time.monotonic()
    with pytest.raises(RemoteRewardError, match=r"hang\.py: loading the reward file took longer than 1 s"):
        FileReward(path, timeout=0.5)
    assert time.monotonic() - t0 < 10


def test_the_module_keeps_its_state_and_model_text_stays_text(tmp_path):
    path = _write(
        tmp_path,
        "calls = []\n\ndef reward_func(queries, prompts, labels):\n"
        "    calls.append(len(queries))\n"
        "    return {'rewards': [float(len(calls))] * len(queries),\n"
        "            'extra_logs': {'chars': [len(q) for q in queries]}}\n",
    )
    src = FileReward(path, timeout=5)
    hostile = "__import__('os')._exit(7)"
    assert src.rewards(["a", "b"], ["", ""], [None, None]).rewards == [1.0, 1.0]
    out = src.rewards([hostile], [""], [None])
    assert out.rewards == [2.0] and out.logs == {"chars": [len(hostile)]}  # passed as text, never run
    src.close()


def test_a_reward_file_that_ends_its_process_is_reported(tmp_path):
    path = _write(tmp_path, "import os\n\ndef reward_func(queries, prompts, labels):\n    os._exit(3)\n", "exit.py")
    src = FileReward(path, timeout=30)
    t0 = time.monotonic()
    with pytest.raises(RemoteRewardError, match=r"exit\.py: the reward file's process ended \(exit code 3\)"):
        src.rewards(["a"], [""], [None])
    assert time.monotonic() - t0 < 10  # noticed at once, not at the limit


def test_a_reply_that_cannot_be_sent_back_is_named(tmp_path):
    path = _write(tmp_path, "def reward_func(queries, prompts, labels):\n    return [lambda: 1]\n", "lam.py")
    src = FileReward(path, timeout=30)
    with pytest.raises(RemoteRewardError, match=r"lam\.py: reward_func returned what cannot be sent back"):
        src.rewards(["a"], [""], [None])
    src.close()


def test_the_worker_ends_when_its_parent_dies_without_cleaning_up(tmp_path):
    import subprocess
    import sys

    path = _write(tmp_path, "def reward_func(queries, prompts, labels):\n    return [0.0] * len(queries)\n")
    code = (
        "import os\nfrom serl.rewards.reward_file import FileReward\n"
        f"src = FileReward({path!r}, timeout=30)\nprint(src.proc.pid, flush=True)\nos._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert _gone(int(out.stdout.split()[0]), within=10)  # no atexit ran: the pipe's end did it


LEAVER = """import os, subprocess, sys, time
PIDS = {pids!r}

def reward_func(queries, prompts, labels):
    pid = os.fork()
    if pid == 0:  # a daemon: fork, leave the session and group, fork again, the middle one exits
        os.setsid()
        if os.fork() == 0:
            with open(PIDS + ".daemon", "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)
        os._exit(0)
    os.waitpid(pid, 0)
    child = subprocess.Popen([sys.executable, "-c", "import os, time; os.setsid(); time.sleep(600)"])
    with open(PIDS + ".child", "w") as f:
        f.write(str(child.pid))
    return [0.0] * len(queries)
"""


def _pid_of(path, within=20.0):
    end = time.monotonic() + within
    while time.monotonic() < end:
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read())
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


@pytest.mark.parametrize("how", ["close", "parent_dies"])
def test_processes_that_left_the_group_end_with_the_run(tmp_path, how):
    import subprocess
    import sys

    pids = str(tmp_path / "pids")
    path = _write(tmp_path, LEAVER.format(pids=pids), "leaver.py")
    if how == "close":
        src = FileReward(path, timeout=30)
        assert src.rewards(["a"], [""], [None]).rewards == [0.0]
        daemon, child = _pid_of(pids + ".daemon"), _pid_of(pids + ".child")
        assert _alive(daemon) and _alive(child)
        src.close()
    else:  # the trainer ends without closing anything: the worker sees its pipe close
        code = (
            "import os\nfrom serl.rewards.reward_file import FileReward\n"
            f"src = FileReward({path!r}, timeout=30)\nsrc.rewards(['a'], [''], [None])\nos._exit(0)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        daemon, child = _pid_of(pids + ".daemon"), _pid_of(pids + ".child")
    try:
        assert _gone(daemon, within=10) and _gone(child, within=10)
    finally:
        for pid in (daemon, child):
            if _alive(pid):
                os.kill(pid, 9)


@pytest.mark.parametrize(
    "logs, needle",
    [
        ({"acc": ["high"]}, "extra_logs['acc'][0] is not a finite number ('high')"),
        ({"acc": [float("nan")]}, "extra_logs['acc'][0] is not a finite number"),
        ({"acc": [1, 2]}, "extra_logs['acc'] must hold 1 numbers (one per sample), got 2 entries"),
        ({"acc": "x"}, "extra_logs['acc'] must hold 1 numbers (one per sample), got str"),
        ([1], "'extra_logs' must be an object"),
    ],
)
def test_bad_extra_logs_name_the_file_and_the_key(tmp_path, logs, needle):
    path = _write(
        tmp_path,
        "def reward_func(queries, prompts, labels):\n"
        f"    return {{'rewards': [1.0] * len(queries), 'extra_logs': {logs!r}}}\n".replace("nan", "float('nan')"),
        "logs.py",
    )
    src = FileReward(path, timeout=30)
    try:
        with pytest.raises(RemoteRewardError) as e:
            src.rewards(["a"], [""], [None])
        assert "logs.py: reward_func" in str(e.value) and needle in str(e.value), str(e.value)
    finally:
        src.close()


def test_a_number_in_extra_logs_is_one_value_per_sample(tmp_path):
    path = _write(
        tmp_path,
        "def reward_func(queries, prompts, labels):\n"
        "    return {'rewards': [1.0] * len(queries), 'extra_logs': {'acc': 0.5, 'ok': [True, 0]}}\n",
    )
    src = FileReward(path, timeout=30)
    try:
        assert src.rewards(["a", "b"], ["", ""], [None, None]).logs == {"acc": [0.5, 0.5], "ok": [True, 0]}
    finally:
        src.close()
