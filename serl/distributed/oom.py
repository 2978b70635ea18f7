"""Ray's out-of-memory kill as serl's one-line error.

Ray's memory monitor kills workers when the node runs low (``ray.exceptions.OutOfMemoryError``,
or an actor's death whose cause says so). The driver then sees a long traceback; ``serl train``
prints this module's one line instead, with the layout that did not fit and what to change
(SERL_DEBUG=1 keeps the traceback)."""

from __future__ import annotations

_MARKS = ("running low on memory", "OutOfMemoryError")


def ray_oom(e: BaseException) -> BaseException | None:
    """Ray's out-of-memory kill: ``e`` or an exception it was raised from; None when neither is."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if type(e).__module__.startswith("ray") and (
            type(e).__name__ == "OutOfMemoryError" or any(m in str(e) for m in _MARKS)
        ):
            return e
        e = e.__cause__ or e.__context__  # type: ignore[assignment]  # None ends the loop
    return None


def is_ray_oom(e: BaseException) -> bool:
    return ray_oom(e) is not None


def oom_message(e: BaseException, cfg=None) -> str:
    """One line: what Ray said (its first line), the layout, and what to change."""
    e = ray_oom(e) or e
    said = next((x.strip() for x in str(e).splitlines() if x.strip()), type(e).__name__)
    layout = ""
    if cfg is not None:
        ranks = cfg.actor_num_nodes * cfg.actor_num_gpus_per_node
        refs = cfg.ref_num_nodes * cfg.ref_num_gpus_per_node
        layout = (
            f"; the layout runs {ranks} learner rank(s), {refs} reference worker(s) and "
            f"{cfg.vllm_num_engines} vLLM engine(s), each with its own copy of the model"
        )
    return (
        f"Ray stopped the run: the machine ran out of memory ({said[:200]}){layout}. Lower "
        f"--actor_num_gpus_per_node, --ref_num_gpus_per_node and --vllm_num_engines, use a smaller "
        f"--pretrain, or leave out --ray (one process)"
    )
