"""Ray's out-of-memory kill reaches the user as serl's one-line error (no Ray start: Ray's own exception)."""

import pytest

from serl.distributed.oom import is_ray_oom

ray_exceptions = pytest.importorskip("ray.exceptions")
SAID = (
    "Task was killed due to the node running low on memory.\nMemory on the node (IP: 10.0.0.1) was 22.1GB / "
    "23.4GB (0.95), which exceeds the memory usage threshold of 0.95."
)


def test_ray_s_oom_kill_is_one_line(train_here, monkeypatch):
    from serl.cli import train

    def dies(cfg, resume_dir=None):
        try:
            raise ray_exceptions.OutOfMemoryError(SAID)
        except Exception as e:  # as the driver sees it: wrapped in what was running
            raise RuntimeError("collect failed") from e

    monkeypatch.setattr(train, "launch", dies)
    rc, err = train_here(
        "--ray",
        "--learner",
        "deepspeed",
        "--actor_num_gpus_per_node",
        "8",
        "--ref_num_gpus_per_node",
        "8",
        "--vllm_num_engines",
        "8",
    )
    assert rc == 1 and "Traceback" not in err, err
    first, second = err.strip().splitlines()[-2:]
    assert first == (
        "serl train: error: Ray stopped the run: the machine ran out of memory (Task was killed due to "
        "the node running low on memory.); the layout runs 8 learner rank(s), 8 reference worker(s) "
        "and 8 vLLM engine(s), each with its own copy of the model. Lower --actor_num_gpus_per_node, "
        "--ref_num_gpus_per_node and --vllm_num_engines, use a smaller --pretrain, or leave out --ray "
        "(one process)"
    )
    assert second == "(SERL_DEBUG=1 prints the traceback)"


def test_other_errors_are_not_taken_for_an_oom():
    assert not is_ray_oom(RuntimeError("running low on memory"))  # not Ray's
    assert not is_ray_oom(ray_exceptions.RayError("an actor failed"))
    assert is_ray_oom(
        ray_exceptions.RayActorError(error_msg="The actor died: killed due to the node running low on memory")
    )
