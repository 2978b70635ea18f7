"""``--resume RUN_DIR``: read the run's saved ``config.yaml`` and apply the flags given now.

What a resume may not change is one list per recipe, ``run_defining(recipe)``: the
common options of ``RUN_DEFINING_COMMON`` plus the recipe's own
``RecipeSpec.resume_fixed``. The same list says what the saved file must hold: a config.yaml that
lacks one of these options (cut short, edited by hand) is refused, since taking the
default would silently train another run. Other options missing from the file (an
older serl did not have them) take their defaults, with a warning.

Hand edits to config.yaml that a resume accepts (``save_steps``, a comment) are recorded in
``config_changes.jsonl`` as flag changes are: serl keeps a copy of what it last wrote
(``WRITTEN``) to compare the file with.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
from datetime import datetime
from pathlib import Path

from serl import ConfigError
from serl.config.compat_flags import aliases_of
from serl.config.files import dump, load_yaml, read_yaml_text, recipe_of
from serl.config.options import TrainConfig
from serl.config.parser import flag_value, parse_args

log = logging.getLogger("serl")
WRITTEN = ".config.yaml.written"  # what serl last wrote to config.yaml: a later difference is a hand edit
CHANGES = "config_changes.jsonl"


# Options of every recipe that make a resume a different run if changed.
RUN_DEFINING_COMMON = (
    "recipe",
    "model",
    "prompt_data",
    "input_key",
    "label_key",
    "output_key",
    "prompt_split",
    "max_samples",
    "seed",
    "advantage_estimator",
    "reward_mode",
    "n_samples_per_prompt",
    "rollout_batch_size",
    "init_kl_coef",
    "use_kl_loss",
    "gamma",
    "actor_learning_rate",
    "generator",
    "learner",
    "train_batch_size",
    "lora_rank",
    "lora_alpha",
    "lora_dropout",
    "target_modules",
)


def write_config(cfg: TrainConfig, run_dir: Path) -> None:
    """Write the run's config.yaml (atomically) and the copy a resume compares it with."""
    dump(cfg, Path(run_dir) / "config.yaml")
    _keep_written(Path(run_dir))


def _keep_written(run_dir: Path) -> None:
    text = (run_dir / "config.yaml").read_bytes()
    tmp = run_dir / f"{WRITTEN}.tmp"
    tmp.write_bytes(text)
    os.replace(tmp, run_dir / WRITTEN)


def _record(run_dir: Path, entry: dict) -> None:
    with open(run_dir / CHANGES, "a") as f:
        f.write(json.dumps({"time": datetime.now().isoformat(timespec="seconds"), **entry}, default=str) + "\n")


def _hand_edits(run_dir: Path, saved_file: Path) -> dict | None:
    """How config.yaml differs from what serl last wrote there: the options whose value changed
    and the changed lines (a comment shows only there). None when unedited, or when there is
    no copy to compare with (a run of an older serl)."""
    import yaml

    written = run_dir / WRITTEN
    if not written.is_file():
        return None
    was_text, now_text = written.read_text(encoding="utf-8"), saved_file.read_text(encoding="utf-8")
    if was_text == now_text:
        return None
    try:
        was = yaml.safe_load(was_text) or {}
    except yaml.YAMLError:  # the copy itself was damaged: compare lines only
        was = {}
    now = yaml.safe_load(now_text) or {}  # load_saved has read it already
    values = (
        {
            k: {"was": was.get(k), "now": now.get(k)}
            for k in [*was, *(k for k in now if k not in was)]
            if was.get(k) != now.get(k)
        }
        if was
        else {}
    )
    lines = [
        ln.rstrip("\n")
        for ln in difflib.ndiff(was_text.splitlines(True), now_text.splitlines(True))
        if ln[:2] in ("- ", "+ ")
    ]
    return {"edited": str(saved_file), "changes": values, "lines": lines[:40]}


def run_defining(recipe: str) -> tuple[str, ...]:
    """Options a resume of a ``recipe`` run refuses to change, and requires in config.yaml."""
    from serl.config.registry import config_class

    return RUN_DEFINING_COMMON + tuple(config_class(recipe).SPEC.resume_fixed)


def _whole_lines(raw: bytes) -> dict | None:
    """The mapping in the complete lines of a file cut short, or None if they are no mapping."""
    import yaml

    try:
        data = yaml.safe_load(raw[: raw.rfind(b"\n") + 1].decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def load_saved(path: Path) -> TrainConfig:
    """A run's saved config.yaml, refused (naming the file, and what is missing or the bad
    line) when it cannot be read or lacks a run-defining option."""
    from serl.config.registry import config_class

    raw = Path(path).read_bytes() if Path(path).is_file() else b""
    last_line = raw.count(b"\n") + 1
    cut = "" if not raw or raw.endswith(b"\n") else f" (it ends in the middle of line {last_line}: cut short?)"
    try:
        p, data, _ = read_yaml_text(str(path))
        keys = list(data)[:-1] if cut else list(data)  # the value on a cut line may have lost its end
    except ConfigError as e:
        # A file cut inside a quoted value is no YAML; its whole lines may still be, and then
        # the message can name what is missing rather than only the broken line.
        whole = _whole_lines(raw) if cut else None
        if whole is None:
            raise ConfigError(f"{e}{cut}") from None
        p, data, keys = Path(path), whole, list(whole)
    if "recipe" not in keys:
        raise ConfigError(
            f"{p}: option 'recipe' is missing{cut}, so the run cannot be resumed; start a new run directory"
        )
    recipe = recipe_of(data["recipe"], f"{p}: option 'recipe'")
    cls = config_class(recipe)
    alias = {a: f.name for f in dataclasses.fields(cls) for a in aliases_of(f.name)}
    present = {alias.get(k, k) for k in keys}
    missing = [n for n in run_defining(recipe) if n not in present]
    if missing:
        raise ConfigError(
            f"{p}: {len(missing)} option(s) that define the run are missing{cut}: "
            f"{', '.join(missing)}. A resume cannot guess them: put them back as the "
            f"run was started, or start a new run directory"
        )
    if cut:
        raise ConfigError(
            f"{p}: the file ends in the middle of line {last_line}, so option "
            f"'{list(data)[-1]}' may be cut short (serl writes config.yaml whole, ending with "
            f"a newline); check that line and end it with a newline"
        )
    values = load_yaml(str(p), cls, saved=True)
    absent = [f.name for f in dataclasses.fields(cls) if f.name not in values]
    if absent:
        log.warning("%s has no %s (saved by an older serl?): the default is used", p, ", ".join(absent))
    return cls(**values)


def run_config(cfg: TrainConfig) -> dict:
    """The run-defining options of ``cfg`` as JSON values: what a checkpoint records
    (``serl.run.checkpoint.RUN_CONFIG``) and a resume compares with config.yaml."""
    return {k: json.loads(json.dumps(getattr(cfg, k), default=str)) for k in run_defining(cfg.recipe)}


def _check_unedited(run_dir: Path, saved_file: Path, saved: TrainConfig) -> None:
    """config.yaml edited by hand after the run started (``model:`` changed) went unseen:
    only flags were compared. Compare it with what the newest checkpoint was made with."""
    from serl.run.checkpoint import RUN_CONFIG, latest_checkpoint
    from serl.run.damage import intact_checkpoint

    try:
        ckpt = intact_checkpoint(run_dir, warn=False)  # the one the resume will continue from
    except ConfigError:  # none intact: the runner says so, naming the file; compare with the newest
        ckpt = latest_checkpoint(run_dir)
    made_file = ckpt / RUN_CONFIG if ckpt is not None else None
    if made_file is None or not made_file.is_file():  # no checkpoint yet, or one of an older serl
        return
    try:
        made = json.loads(made_file.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"--resume: cannot read {made_file} ({e}); the checkpoint is damaged") from None
    now = run_config(saved)
    for k, was in made.items():
        if k in now and now[k] != was:
            raise ConfigError(
                f"--resume: {saved_file} has {k}: {now[k]!r}, but checkpoint {made_file.parent.name} was made "
                f"with {was!r}; the file was edited after the run started. Put back {k}: {was!r}, "
                f"or start a new run directory"
            )


def resume_config(run_dir: Path, argv: list[str]) -> TrainConfig:
    """The saved config, with flags given now applied; refuses run-defining changes,
    made by a flag or by editing config.yaml."""
    saved_file = run_dir / "config.yaml"
    if not saved_file.is_file():
        raise ConfigError(f"--resume {run_dir}: no config.yaml there (not a serl run directory)")
    saved = load_saved(saved_file)
    _check_unedited(run_dir, saved_file, saved)
    edits = _hand_edits(run_dir, saved_file)
    asked = flag_value(argv, "--recipe")
    if asked is not None and asked != saved.recipe:
        raise ConfigError(
            f"--resume: run {run_dir} was a '{saved.recipe}' run; --recipe {asked} cannot "
            f"resume it (start a new run directory for a '{asked}' run)"
        )
    cfg, _ = parse_args(["--config", str(saved_file), *argv], saved=True)
    cfg.run_dir = str(run_dir)
    changed = {
        f.name: (getattr(saved, f.name), getattr(cfg, f.name))
        for f in dataclasses.fields(cfg)
        if getattr(saved, f.name) != getattr(cfg, f.name)
    }
    fixed = run_defining(cfg.recipe)
    bad = {k: v for k, v in changed.items() if k in fixed}
    if bad:
        k, (was, now) = next(iter(bad.items()))
        raise ConfigError(
            f"--resume: option '{k}' was {was!r} in {saved_file}, now {now!r}; "
            f"that makes it a different run (start a new run directory instead)"
        )
    if edits:  # accepted (run-defining edits were refused above): recorded, and not recorded again
        _record(run_dir, edits)
        log.info(
            "%s was edited by hand since serl wrote it: %s",
            saved_file,
            ", ".join(edits["changes"]) or "comments or layout only",
        )
        _keep_written(run_dir)
    if changed:
        _record(run_dir, {"changes": {k: {"was": a, "now": b} for k, (a, b) in changed.items()}})
        write_config(cfg, run_dir)
        log.info("resume with changed options: %s", ", ".join(changed))
    return cfg
