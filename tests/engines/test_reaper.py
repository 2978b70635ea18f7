"""serl.engines.reaper: an engine's child processes die with their owner, even by SIGKILL,
and what they held in /dev/shm goes with them."""

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
    # a child that maps a /dev/shm file (as vLLM's message queues do) and a plain child
    mapper = subprocess.Popen([sys.executable, "-c", "import mmap, sys, time; f = open(sys.argv[1], 'w+b'); "
                               "f.truncate(4096); m = mmap.mmap(f.fileno(), 4096); time.sleep(120)", sys.argv[3]])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    grandchild_parent = subprocess.Popen([sys.executable, "-c",
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)"])
    time.sleep(1.0)
    reaper = Reaper(paths=[sys.argv[4]])
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


@pytest.fixture
def shm_paths(tmp_path):
    """A file a child maps (in /dev/shm, where the reaper looks) and a directory the owner names."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm on this system")
    mapped = Path("/dev/shm") / f"serl-test-reaper-{os.getpid()}-{time.monotonic_ns()}"
    named = tmp_path / "serl-weights-test"
    named.mkdir()
    (named / "model.safetensors").write_bytes(b"x" * 64)
    yield mapped, named
    mapped.unlink(missing_ok=True)


def _run_owner(mode, mapped, named):
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(ROOT), mode, str(mapped), str(named)], stdout=subprocess.PIPE, text=True
    )
    pids = [int(x) for x in owner.stdout.readline().split()]
    assert len(pids) == 4, pids  # the mapper, a child, and a child with its own child
    assert mapped.exists() and named.exists()
    return owner, pids


def test_children_die_when_the_owner_is_killed_and_their_shm_goes(shm_paths):
    mapped, named = shm_paths
    owner, pids = _run_owner("watch", mapped, named)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    deadline = time.time() + 15
    while (any(map(_alive, pids)) or mapped.exists() or named.exists()) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(map(_alive, pids))
    assert not mapped.exists() and not named.exists()


def test_close_leaves_them_to_the_normal_shutdown(shm_paths):
    mapped, named = shm_paths
    owner, pids = _run_owner("close", mapped, named)
    try:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        time.sleep(2)
        assert all(map(_alive, pids))
        assert mapped.exists() and named.exists()
    finally:
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
