"""Start and stop one local Ray head for a test, and only that one.

``ray stop`` would stop every Ray process on the machine (other people's too), so the
head's processes are found by what is unique to it: its temp dir or its GCS port on the
command line, plus their descendants; they are stopped by pid.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PORT_FLAGS = (
    "--port",
    "--dashboard-port",
    "--ray-client-server-port",
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@dataclass
class Head:
    temp_dir: str
    ports: dict[str, int]

    @property
    def gcs_port(self) -> int:
        return self.ports["--port"]

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.ports['--dashboard-port']}"

    def pids(self) -> list[int]:
        """Processes of this head: a marker on the command line, then all their children."""
        marks = (self.temp_dir, f":{self.gcs_port} ", f":{self.gcs_port}\0")
        parent: dict[int, int] = {}
        roots = set()
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace") + "\0"
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            parent[int(d.name)] = ppid
            if any(m in cmd for m in marks):
                roots.add(int(d.name))
        found, grew = set(roots), True
        while grew:
            kids = {p for p, pp in parent.items() if pp in found and p not in found}
            found |= kids
            grew = bool(kids)
        found.discard(os.getpid())
        return sorted(found)

    def stop(self, wait: float = 15.0) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            end = time.time() + wait
            while self.pids() and time.time() < end:
                time.sleep(0.5)
            if not self.pids():
                break
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def start_head(num_cpus: int = 2, timeout: float = 120.0) -> Head:
    ray = str(Path(sys.executable).with_name("ray"))
    temp = tempfile.mkdtemp(prefix="serl-rh-", dir="/tmp")  # socket paths must stay short
    ports = dict(zip(PORT_FLAGS, _free_ports(len(PORT_FLAGS))))
    head = Head(temp, ports)
    cmd = [
        ray,
        "start",
        "--head",
        "--node-ip-address",
        "127.0.0.1",
        "--dashboard-host",
        "127.0.0.1",
        "--include-dashboard",
        "true",
        "--num-cpus",
        str(num_cpus),
        "--temp-dir",
        temp,
        "--disable-usage-stats",
    ]
    for flag, port in ports.items():
        cmd += [flag, str(port)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        head.stop()
        raise
    if r.returncode != 0:
        head.stop()
        raise RuntimeError(f"ray start failed: {r.stderr[-2000:]}")
    return head
