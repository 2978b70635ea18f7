"""The run state a checkpoint keeps besides the policy, in one place: the step, every RNG,
the generator's sampling position and the recipe's own state (``Recipe.state_dict``).

Layout 2 of ``trainer_state.pt``::

    {"layout": 2, "step": int, "rng": <the recipe's random.Random>, "numpy_rng": ...,
     "torch_rng": ..., "generator": <Generator.state_dict()>, "recipe": {...}, "guard": ...}

Layout 1 (every checkpoint before it) was one flat dict that each recipe wrote itself: the
same entries at the top level (``generator_calls`` for the generator), beside the recipe's
own keys. ``upgrade`` reads it as layout 2, so old runs resume.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

LAYOUT = 2
_COMMON = ("step", "rng", "numpy_rng", "torch_rng", "generator_calls", "guard")


def generator_state(generator) -> dict:
    """What decides the generator's next samples (``Generator.state_dict``); a generator
    without one that counts its calls gives that count; others, nothing."""
    if hasattr(generator, "state_dict"):
        return generator.state_dict()
    return {"calls": generator.calls} if hasattr(generator, "calls") else {}


def load_generator_state(generator, state: dict) -> None:
    if hasattr(generator, "load_state_dict"):
        generator.load_state_dict(state)
    elif "calls" in state and hasattr(generator, "calls"):
        generator.calls = state["calls"]


def capture(recipe, step: int, frame=None) -> dict:
    """The run state after ``step`` (what a checkpoint keeps); ``frame``: what the loop collects
    through under --async_train (``serl.run.async_frame.Overlap``), or None."""
    state = {
        "layout": LAYOUT,
        "step": step,
        "rng": recipe.rng.getstate(),
        "numpy_rng": np.random.get_state(),
        "torch_rng": torch.get_rng_state(),
        "generator": generator_state(recipe.generator),
        "recipe": recipe.state_dict(),
    }
    kept = frame.state_dict() if frame is not None else None
    if kept is not None:  # --async_train: the batch collected ahead, ...
        state["frame"] = kept
    return state


def upgrade(state: dict) -> dict:
    """A saved state in layout 2 (layout 1, the flat dict of older runs, converted)."""
    if state.get("layout") == LAYOUT:
        return state
    if "layout" in state:
        raise ValueError(
            f"trainer_state layout {state['layout']} is newer than this serl reads ({LAYOUT}); "
            f"upgrade serl to resume this run"
        )
    # a ray run's old checkpoint has generator_calls 0 (GeneratorGroup counted nothing): the
    # engines then start where fresh ones do, as those runs always resumed
    generator = {"calls": state["generator_calls"]} if state.get("generator_calls") else {}
    return {
        "layout": LAYOUT,
        "step": state["step"],
        "rng": state["rng"],
        "numpy_rng": state.get("numpy_rng"),
        "torch_rng": state["torch_rng"],
        "generator": generator,
        "guard": state.get("guard"),
        "recipe": {k: v for k, v in state.items() if k not in _COMMON},
    }


def restore(recipe, state: dict, frame=None) -> dict:
    """Put ``recipe`` (and its generator, the global RNGs and ``frame``) back where ``state`` was
    taken; the policy (and a lagging reference) is the loop's to load. Returns ``state`` in layout 2
    (its step: ``state["step"]``)."""
    state = upgrade(state)
    recipe.rng.setstate(state["rng"])
    if state.get("numpy_rng") is not None:
        np.random.set_state(state["numpy_rng"])
    torch.set_rng_state(state["torch_rng"])
    load_generator_state(recipe.generator, state["generator"])
    recipe.load_state_dict(state["recipe"])
    if frame is not None and state.get("frame"):
        frame.load_state_dict(state["frame"])
    elif state.get("frame", {}).get("ahead"):
        from serl import ConfigError

        raise ConfigError(
            "this checkpoint holds a batch that an --async_train run collected ahead; resume it "
            "with --async_train (or --importance_sampling_correction) so that batch is trained"
        )
    return state


@contextmanager
def isolated_rng(recipe):
    """Around evaluation: every RNG and the generator's position are put back afterwards,
    so evaluating (or not) never changes what training samples next."""
    rng, np_rng, torch_rng = recipe.rng.getstate(), np.random.get_state(), torch.get_rng_state()
    gen = generator_state(recipe.generator)
    try:
        yield
    finally:
        recipe.rng.setstate(rng)
        np.random.set_state(np_rng)
        torch.set_rng_state(torch_rng)
        load_generator_state(recipe.generator, gen)
