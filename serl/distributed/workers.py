"""The Ray actor classes: plain classes, turned into actors with ``ray.remote`` by
``serl.distributed.groups`` (so importing this module does not need Ray).

Each worker builds its engine from the run's ``TrainConfig`` (passed as a dict) and the
resolved model path, so what runs inside an actor is the same code as in one process.
"""

from __future__ import annotations

import os
import socket
from typing import Any


def _config(cfg_dict: dict):
    from serl.config.options import config_from_dict

    return config_from_dict(cfg_dict)


def _quiet_threads() -> None:
    """One actor per slot: do not let each one spawn a thread per core."""
    import torch

    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    torch.set_num_threads(max(1, threads))


class LearnerWorker:
    """One rank of the learner group (DeepSpeed), or the whole torch learner."""

    def __init__(self, rank: int, world: int):
        self.rank, self.world = rank, world
        self.learner: Any = None  # made by setup()

    def address(self) -> tuple[str, int]:
        """Rank 0's address and a free port, for the process group's rendezvous."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, cfg_dict: dict, plan_dict: dict, model_path: str, master: tuple[str, int]) -> int:
        from serl.config.plan import RunPlan
        from serl.engines.factory import make_learner

        _quiet_threads()
        cfg = _config(cfg_dict)
        if cfg.learner == "deepspeed":  # Ray gives each actor its GPU as device 0; the learner
            # sets DeepSpeed's accelerator from --device (deepspeed_learner.use_accelerator)
            os.environ.update(
                RANK=str(self.rank),
                WORLD_SIZE=str(self.world),
                LOCAL_RANK="0",
                MASTER_ADDR=master[0],
                MASTER_PORT=str(master[1]),
            )
        self.learner = make_learner(cfg, RunPlan.from_dict(plan_dict), model_path, None)
        return self.rank

    # every method below is called on all ranks at once (they are collective)
    def logprobs(self, prompt_ids, response_ids, model: str = "policy"):
        out = self.learner.logprobs(prompt_ids, response_ids, model=model)
        return out if self.rank == 0 else None

    def step(self, batch):
        m = self.learner.step(batch)
        return m if self.rank == 0 else None

    def collect_weights(self) -> dict | None:
        """The policy weights as CPU tensors on rank 0 (gathered one parameter at a time)."""
        out = {}
        for name, t in self.learner.named_weights():
            if self.rank == 0:
                out[name] = t.detach().to("cpu", copy=True)
        return out if self.rank == 0 else None

    def sync_ref(self) -> None:
        self.learner.sync_ref()

    def save(self, path: str, state: bool = True) -> None:
        self.learner.save(path, state)

    def load(self, path: str) -> None:
        self.learner.load(path)

    def export_hf(self, path: str) -> None:
        if hasattr(self.learner, "export_hf"):
            self.learner.export_hf(path)
        elif self.rank == 0:
            self.learner.save(path)

    def close(self) -> None:
        if hasattr(self.learner, "close"):
            self.learner.close()


class ReferenceWorker:
    """The frozen reference model: scores sequences, never trains (the learners' scoring
    path, no optimizer, on the actor's GPU when it has one)."""

    def setup(self, cfg_dict: dict, model_path: str) -> None:
        from serl.engines.factory import make_scorer

        _quiet_threads()
        self.model = make_scorer(_config(cfg_dict), model_path)

    def logprobs(self, prompt_ids, response_ids):
        return self.model.logprobs(prompt_ids, response_ids, model="policy")


class GeneratorWorker:
    """One generation engine: vLLM (``--generator vllm``/auto with vLLM installed) or HF."""

    def setup(self, cfg_dict: dict, model_path: str, index: int) -> str:
        from serl.engines.factory import generator_from_config
        from serl.models.resolve import load_tokenizer

        _quiet_threads()
        # the seed depends on the index (engines must not draw the same samples); sleep and
        # wake are driven by GeneratorGroup for all engines together
        self.gen = generator_from_config(
            _config(cfg_dict), model_path, load_tokenizer(model_path), index=index, manage_sleep=False
        )
        return type(self.gen).__name__

    def generate(self, prompts, n, sampling):
        return self.gen.generate(prompts, n, sampling)

    def load_weights(self, weights: dict) -> None:
        self.gen.load_weights(weights.items())

    def state_dict(self) -> dict:
        return self.gen.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.gen.load_state_dict(state)

    def sleep(self) -> None:
        if hasattr(self.gen, "sleep"):
            self.gen.sleep()

    def wake_up(self) -> None:
        if hasattr(self.gen, "wake_up"):
            self.gen.wake_up()

    def close(self) -> None:
        self.gen.close()


class RewardWorker:
    """math-verify equivalence checks (its own process pool with hard timeouts)."""

    def setup(self, timeout: float, workers: int = 1) -> None:
        from serl.rewards import EquivalenceChecker

        self.checker = EquivalenceChecker(timeout=timeout, workers=workers)

    def run_jobs(self, jobs: list[dict]) -> list:
        return self.checker.run_jobs(jobs)

    def equal_many(self, pairs: list[tuple[str, str]]) -> list[bool]:
        return self.checker.equal_many(pairs)

    def stats(self) -> dict[str, int]:
        return dict(self.checker.stats)

    def close(self) -> None:
        self.checker.close()
