"""Which modules a LoRA adapter wraps: ``--target_modules``, read the one way for the config's check
(``serl.config.options``) and for the adapter itself (``serl.engines.lora``)."""

from __future__ import annotations

ALL_LINEAR = "all-linear"  # peft: every linear layer except the output (LM) head


def parse_targets(spec: str) -> str | list[str]:
    """``all-linear`` (the default) or comma-separated module names, e.g. ``q_proj,v_proj``."""
    names = [s.strip() for s in str(spec).split(",") if s.strip()]
    if not names or names == [ALL_LINEAR]:
        return ALL_LINEAR
    if ALL_LINEAR in names:
        raise ValueError(f"target_modules: '{ALL_LINEAR}' cannot be combined with names ({spec!r})")
    return names
