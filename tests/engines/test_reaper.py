"""serl.engines.reaper: an engine's child processes die with their owner, even by SIGKILL."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil", reason="psutil comes with vLLM")
ROOT = Path(__file__).resolve().parents[2]

OWNER = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from serl.engines.reaper import Reaper
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    grandchild_parent = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)"])
    time.sleep(1.0)
    reaper = Reaper()
    if sys.argv[2] == "close":
        reaper.close()
    print(" ".join(map(str, reaper.pids)), flush=True)
    time.sleep(120)
""")


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _run_owner(mode):
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(ROOT), mode], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in owner.stdout.readline().split()]
    assert len(pids) == 3, pids  # a child, and a child with its own child
    return owner, pids


def test_children_die_when_the_owner_is_killed():
    owner, pids = _run_owner("watch")
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.time() + 15
    while any(map(_alive, pids)) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, pids))


def test_close_leaves_them_to_the_normal_shutdown():
    owner, pids = _run_owner("close")
    try:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        time.sleep(2)
        assert all(map(_alive, pids))
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
