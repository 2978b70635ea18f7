"""One worker process of the equivalence pool (:mod:`serl.rewards.equivalence`), and a process
start that never re-imports the user's ``__main__``.

multiprocessing's forkserver and spawn starts normally re-run the parent's main script (or
read ``<stdin>``) in every child, so a plain script that uses the checker at module level,
with no ``if __name__ == "__main__":`` guard, made every worker die at start. The worker target
lives in this package and needs nothing from ``__main__``, so our own starts drop the
main-module entries from the child's preparation data (multiprocessing has no public switch
for this; the filter is scoped to this thread's worker starts and leaves every other use
alone). ``serl.rewards.reward_file`` starts its process the same way.
"""

from __future__ import annotations

import threading
import time
from multiprocessing import spawn


def _worker_entry(*args) -> None:
    """Process target; imports math-verify only in the worker (the forkserver
    has it preloaded), never in the parent."""
    from serl.rewards._worker import worker_main

    worker_main(*args)


_starting = threading.local()  # set while this thread starts one of our workers


def _without_main(get_preparation_data):
    def wrapper(name):
        data = get_preparation_data(name)
        if getattr(_starting, "worker", False):  # our worker needs nothing from __main__
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    wrapper.serl_without_main = True
    return wrapper


def start_without_main(proc) -> None:
    """``proc.start()`` without the child re-running the parent's main script."""
    if not getattr(spawn.get_preparation_data, "serl_without_main", False):
        spawn.get_preparation_data = _without_main(spawn.get_preparation_data)
    _starting.worker = True
    try:
        proc.start()
    finally:
        _starting.worker = False


class Slot:
    """One worker process and its pipe and progress array."""

    def __init__(self, ctx, args):
        self.ctx, self.args = ctx, args
        self.progress = ctx.Array("d", 4, lock=False)
        self.start()

    def start(self):
        for k in range(4):
            self.progress[k] = 0.0
        self.conn, child = self.ctx.Pipe(duplex=True)
        self.proc = self.ctx.Process(target=_worker_entry, args=(child, self.progress, *self.args), daemon=True)
        start_without_main(self.proc)
        child.close()
        self.job: int | None = None
        self.ready = False  # until the worker's READY message arrives
        self.started_at = time.monotonic()

    def kill(self):
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        try:
            self.conn.close()
        except OSError:  # a reader in another thread closed it already (SIGTERM mid-job: EBADF)
            pass

    def stop(self):
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        self.proc.join(1)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1)
        self.conn.close()
