"""Past one machine: the engines as Ray actors, placed colocated or split.

``run_with_ray(cfg)`` runs the same ``Trainer`` loop as ``serl train``, with proxies
(``GeneratorGroup``, ``LearnerGroup``, ``RewardGroup``) standing in for the one-process
engines. Importing this package does not import Ray.
"""

from serl.distributed.groups import GeneratorGroup, LearnerGroup, RemoteWeights, RewardGroup
from serl.distributed.placement import ResourcePlan, actor_options, place, plan_resources


def run_with_ray(cfg):
    from serl.distributed.run import run_with_ray as _run

    return _run(cfg)


__all__ = [
    "GeneratorGroup",
    "LearnerGroup",
    "RemoteWeights",
    "ResourcePlan",
    "RewardGroup",
    "actor_options",
    "place",
    "plan_resources",
    "run_with_ray",
]
