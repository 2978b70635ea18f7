"""The names users of the four seeds type, rewritten to serl's before the parser sees them.

``rewrite(argv)`` turns a command line written for SeRL/OpenRLHF, spiral-rl or verl's SPIN
recipe into serl's flags; the parser then checks everything as usual. What is mapped and
how is in ``docs/compat.md`` (one table per seed). The rules:

* ``--flag`` names of another project with a serl meaning become serl's flag
  (``--eval_dataset`` -> ``--eval_data``); a value serl cannot honour is refused with the
  reason (``--max_epochs 2``).
* ``key=value`` and dotted ``section.key=value`` words (spiral-rl's and verl's
  overrides) become ``--key value``; a dotted key is looked up in ``VERL_KEYS``, and one
  with no serl meaning is refused by name, never dropped.
* OpenRLHF 0.11's dotted flags (``--reward.remote_url``), SeRL's flags serl has no option for
  (``--packing_samples``, ``--num_episodes``, ...) and SPIRAL-on-Tinker's keys: ``serl.config.compat_flags``.
* with ``--recipe spiral``, the rest of spiral-rl's ``run.sh`` (its ``SelfPlayArgs`` and OAT's flags):
  ``serl.config.compat_spiral``, which maps, accepts one value, notes on stderr what has no effect, or refuses.
* ``--config FILE`` whose YAML has nested sections (verl's ``algorithm:``, ``trainer:``,
  ...) is read here and handed on as flags, each nested key mapped as above; a flat YAML
  file is left to the parser, unchanged.

Errors are ``ConfigError`` (exit 2), naming the word or the file and key at fault.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence

from serl import ConfigError
from serl.config.compat_flags import FLAGS, VERL_KEYS, VERL_NOTED, translate
from serl.config.compat_spell import spell_words
from serl.config.compat_spiral import NAMES as OAT_NAMES
from serl.config.compat_spiral import OatFlags, oat_bool
from serl.config.files import read_yaml
from serl.config.parser import flag_value

# key=value, as spiral-rl and verl (Hydra) write them; Hydra's +key (add) and ++key (add or override) too
_OVERRIDE = re.compile(r"^\+{0,2}([A-Za-z_][\w\-]*(?:\.[A-Za-z_][\w\-]*)*)=(.*)$", re.S)


def _verl(key: str, value: str, where: str, argv: Sequence[str] = ()) -> list[str]:
    if key in VERL_NOTED:
        when, why = VERL_NOTED[key]
        if when is None or value.strip().lower() == when:
            print(f"serl: note: {key}={value}: {why}", file=sys.stderr)
            return []
        raise ConfigError(f"{where}: '{key}' can only be {when} in serl: {why}")
    if key in ("trainer.total_epochs", "data.epochs"):  # passes over the prompts; serl counts steps
        if any(a.split("=")[0] in ("--steps", "steps", "trainer.total_training_steps") for a in argv):
            print(f"serl: note: {key}={value}: serl counts training steps; --steps decides", file=sys.stderr)
            return []
        raise ConfigError(
            f"{where}: serl counts training steps, not passes over the prompts; give "
            f"trainer.total_training_steps=N (--steps N) instead"
        )
    if key not in VERL_KEYS:
        raise ConfigError(
            f"{where}: '{key}' has no serl meaning and is refused (not dropped); the verl keys "
            f"serl maps are listed in docs/compat.md"
        )
    flag, how = VERL_KEYS[key]
    if how == "steps":  # verl: refresh the reference every N steps
        if not value.strip().lstrip("+").isdigit() or int(value) < 1:
            raise ConfigError(
                f"{where}: '{key}' must be a whole number >= 1 (the reference becomes the "
                f"policy every N steps), got {value!r}"
            )
        value = f"steps:{int(value)}"
    elif how == "freq" and value.strip() == "-1":  # verl's "never"
        value = "0"
    elif how == "logger":  # ['console', 'wandb'] -> W&B on or off; the console is always on
        names = {w.strip(" '\"") for w in value.strip("[] ").split(",") if w.strip(" '\"")}
        unknown = names - {"console", "wandb"}
        if unknown:
            raise ConfigError(
                f"{where}: serl logs to the console, metrics.jsonl and, with wandb, to W&B; "
                f"{', '.join(sorted(unknown))} is not available (--use_tensorboard DIR for TensorBoard)"
            )
        value = "true" if "wandb" in names else "false"
    return [f"--{flag}", value]


def _recipe(argv: list[str]) -> str:
    for i, a in enumerate(argv):
        if a == "--recipe" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--recipe="):
            return a.split("=", 1)[1]
        m = _OVERRIDE.match(a)
        if m and m.group(1) == "recipe":
            return m.group(2)
    conf = flag_value(argv, "--config")  # a flat YAML file naming the recipe
    return str(read_yaml(conf)[1].get("recipe") or "") if conf else ""


def _values(argv: list[str], i: int) -> tuple[list[str], int]:
    """The words after argv[i] up to the next flag or key=value override (nargs='+' values)."""
    j = i + 1
    while j < len(argv) and not argv[j].startswith("--") and not _OVERRIDE.match(argv[j]):
        j += 1
    return argv[i + 1 : j], j


def _given(argv: list[str], name: str) -> list[str] | None:
    """The values of the first ``--name`` (or ``name=value`` word) in ``argv`` (``[]`` for a bare
    flag), None if absent."""
    for i, a in enumerate(argv):
        if a.split("=")[0] in (f"--{name}", name if "=" in a else None):
            return [a.split("=", 1)[1]] if "=" in a else _values(argv, i)[0]
    return None


def _oat_gpus(vals: list[str], collocate: bool) -> list[str]:
    """OAT's ``--gpus N`` on one node: with ``--collocate`` vLLM actors and DeepSpeed learner
    ranks share all N GPUs; without, actors take the first half and the learner the second
    (oat/interface.py ``get_program``). One vLLM engine per actor GPU, one rank per learner GPU."""
    if len(vals) != 1 or not vals[0].strip().isdigit() or int(vals[0]) < 1:
        raise ConfigError(f"--gpus: expected a whole number >= 1, got {' '.join(vals) or 'no value'}")
    n = int(vals[0])
    if n == 1:  # one device: serl's single process already shares it
        return []
    if n % 2 and not collocate:
        raise ConfigError(
            f"--gpus {n}: OAT would make one GPU serve both halves; serl needs an even count "
            f"without --collocate (or add --collocate)"
        )
    k = n if collocate else n // 2
    return [
        "--ray",
        "--learner",
        "deepspeed",
        "--actor_num_gpus_per_node",
        str(k),
        "--vllm_num_engines",
        str(k),
        *(["--colocate_all_models", "true"] if collocate else []),
    ]


_OAT_RUN = ("gpus", "total_gpus", "collocate", "rnd_seed", "no_rnd_seed", "wb_org", "wb_group")  # spiral-rl's run.sh


def _oat_run_flag(name: str, vals: list[str], collocate: bool, ray_without_gpus: bool):
    """One of spiral-rl's run flags (``_OAT_RUN``): (serl's words, the clock seed's words or None)."""
    if name in ("gpus", "total_gpus"):
        return _oat_gpus(vals, collocate), None
    if name == "collocate":  # read by rewrite; with --ray and no --gpus it still shares the GPUs
        return (["--colocate_all_models", "true"] if collocate and ray_without_gpus else []), None
    if name in ("rnd_seed", "no_rnd_seed"):  # OAT: a seed from the clock, overriding --seed
        on = oat_bool(name, vals) if name == "rnd_seed" else False
        return [], (["--seed", str(time.time_ns() % 2**31)] if on else [])  # kept in config.yaml
    raise ConfigError(
        f"--{name}: serl has no flag for the W&B {name[3:]}; set "
        f"{'WANDB_ENTITY' if name == 'wb_org' else 'WANDB_RUN_GROUP'} in the environment"
    )


_VALUED = ("max_epochs", "vllm_is_truncated_threshold", "vllm_is_correction_type", "fsp_enabled", "fsp_pool_size")


def _valued(name: str, vals: list[str]) -> list[str]:
    """One of the flags in ``_VALUED`` with its values, in serl's words (or refused)."""
    if name == "max_epochs":
        if vals != ["1"]:
            raise ConfigError(
                f"--max_epochs: serl trains each rollout once per step, as SeRL's scripts do "
                f"(--max_epochs 1); got {' '.join(vals) or 'no value'}. For more passes over "
                f"a rollout use --train_batch_size (mini-batches) or more --steps"
            )
        return []
    if name in ("vllm_is_truncated_threshold", "vllm_is_correction_type"):  # OpenRLHF's TIS settings
        return _openrlhf_is(name, vals)
    if name == "fsp_enabled":  # spiral-rl: fictitious self-play against past checkpoints
        on = (vals or ["true"])[0].lower() in ("1", "true", "yes", "on")
        if vals and vals[0].lower() not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            raise ConfigError(f"--fsp_enabled: expected true or false, got {vals[0]!r}")
        return ["--opponent", "population"] if on else []
    # fsp_pool_size (SPIRAL): spiral-rl counts snapshots; serl the current too
    if len(vals) != 1 or not vals[0].strip().isdigit() or int(vals[0]) < 1:
        raise ConfigError(f"--fsp_pool_size: expected a whole number >= 1, got {' '.join(vals) or 'no value'}")
    return ["--population_size", str(int(vals[0]) + 1)]


def rewrite(argv: list[str], refused: list[str] | None = None) -> list[str]:
    """``argv`` in serl's names (see the module doc). ``refused``: a list that collects each refused
    word's message (the word and its values are left out) instead of raising at the first."""
    argv = _expand_yaml(list(argv))
    recipe = _recipe(argv)
    if recipe == "spiral":  # OAT's flags (tyro) also come with hyphens: --gradient-checkpointing
        argv = [
            ("--" + a[2:].partition("=")[0].replace("-", "_") + "".join(a[2:].partition("=")[1:]))
            if a.startswith("--")
            else a
            for a in argv
        ]
    given = _given(argv, "collocate")
    collocate = recipe == "spiral" and given is not None and oat_bool("collocate", given)
    gpus = any(_given(argv, n) is not None for n in ("gpus", "total_gpus"))
    rnd_seed: list[str] = []
    out: list[str] = []
    oat = OatFlags(argv, collocate, _given) if recipe == "spiral" else None  # the rest of spiral-rl's run.sh
    i = 0
    while i < len(argv):
        try:
            a = argv[i]
            name, eq, inline = a[2:].partition("=") if a.startswith("--") else ("", "", "")
            if oat is not None and name in OAT_NAMES:
                vals, j = ([inline], i + 1) if eq else _values(argv, i)
                out += oat.translate(name, vals)
                i = j
                continue
            if recipe == "spiral" and name in _OAT_RUN:
                vals, j = ([inline], i + 1) if eq else _values(argv, i)
                words, seed = _oat_run_flag(name, vals, collocate, "--ray" in argv and not gpus)
                out += words
                rnd_seed = seed if seed is not None else rnd_seed
                i = j
                continue
            m = _OVERRIDE.match(a) if not a.startswith("-") else None
            if m and (i == 0 or not argv[i - 1].startswith("--") or "=" in argv[i - 1]):
                key, value = m.group(1), m.group(2)
                spell = spell_words(key, value, argv) if recipe == "spell" else None  # SPELL's own names
                if spell is not None:
                    out += spell
                elif "." in key:
                    out += _verl(key, value, f"override {a!r}", argv)
                else:
                    argv[i : i + 1] = [f"--{key}", value]  # then read as that flag
                    continue
                i += 1
                continue
            if name:  # OpenRLHF 0.11's dotted flags, SeRL's names serl notes or refuses, Tinker's keys
                vals, j = ([inline], i + 1) if eq else _values(argv, i)
                words = translate(name, vals, argv, recipe)
                if words is not None:
                    if words[:1] == ["--max_epochs"]:  # OpenRLHF 0.11's --train.max_epochs: the rule below
                        argv[i:j] = words
                        continue
                    out += words
                    i = j
                    continue
            if name in _VALUED and (name != "fsp_pool_size" or recipe == "spiral"):
                vals, j = ([inline], i + 1) if eq else _values(argv, i)
                out += _valued(name, vals)
                i = j
                continue
            if name == "beta" and recipe == "spiral":  # spiral-rl's --beta is the KL coefficient
                out.append(f"--init_kl_coef={inline}" if eq else "--init_kl_coef")
                i += 1
                continue
            if name in FLAGS and recipe in (FLAGS[name][1] or (recipe,)):  # None: every recipe
                target = FLAGS[name][0]
                if target == "games":
                    vals, j = ([inline], i + 1) if eq else _values(argv, i)
                    _note_textarena(vals)
                if target == "games" and not eq:  # --env_ids A B C -> --games A,B,C
                    out += [f"--{target}", ",".join(vals)] if vals else [f"--{target}"]
                    i = j
                    continue
                out.append(f"--{target}={inline}" if eq else f"--{target}")
                i += 1
                continue
            out.append(a)
            i += 1
        except ConfigError as e:  # every refusal of the command line at once, when the caller collects them
            if refused is None:
                raise
            refused.append(str(e))
            i = _skip(argv, i)
    return out + rnd_seed + (oat.tail if oat is not None else []) + _verl_mode(argv, recipe)


def _verl_mode(argv: list[str], recipe: str) -> list[str]:
    """verl's SPIN recipe is online DPO: its dotted keys with --recipe spin choose --spin_mode online,
    unless the command line names a mode."""
    if recipe != "spin" or _given(argv, "spin_mode") is not None:
        return []
    if not any("." in m.group(1) for m in map(_OVERRIDE.match, argv) if m):
        return []
    print(
        "serl: note: verl's keys: online DPO (--spin_mode online), as verl's SPIN recipe trains; "
        "--spin_mode spin is SPIN's own human-answer mode",
        file=sys.stderr,
    )
    return ["--spin_mode", "online"]


def _skip(argv: list[str], i: int) -> int:
    """The index after the word at ``i`` and its values."""
    return _values(argv, i)[1] if argv[i].startswith("--") and "=" not in argv[i] else i + 1


def _note_textarena(vals: list[str]) -> None:
    """A line on stderr where a TextArena id's game is serl's with other sizes (docs/compat.md)."""
    ids = [w.strip() for v in vals for w in v.split(",")]
    for tid in ("LiarsDice-v0", "LiarsDice-v1"):
        if tid in ids:
            print(
                f"serl: note: {tid}: played as serl's liars_dice, the same bids and call with 2 dice a player "
                f"(TextArena's and spiral-rl's deal 5)",
                file=sys.stderr,
            )


def _openrlhf_is(name: str, vals: list[str]) -> list[str]:
    """OpenRLHF's ``--vllm_is_truncated_threshold LOW HIGH`` (TIS clamps the weight to [LOW, HIGH]) and
    ``--vllm_is_correction_type``: serl truncates from above only (TRL's cap), so LOW must be 0 and the
    type ``tis``; anything else is refused with the reason."""
    if name == "vllm_is_correction_type":
        if vals != ["tis"]:
            raise ConfigError(
                f"--vllm_is_correction_type: serl has truncated importance sampling (tis) only; "
                f"got {' '.join(vals) or 'no value'}"
            )
        return []
    try:
        low, high = (float(v) for v in vals)
    except ValueError:
        raise ConfigError(
            f"--vllm_is_truncated_threshold: expected two numbers LOW HIGH, got {' '.join(vals) or 'no value'}"
        ) from None
    if low != 0:
        raise ConfigError(
            f"--vllm_is_truncated_threshold: serl caps the importance weights from above only "
            f"(--importance_sampling_cap HIGH); a lower clamp of {low:g} would raise small weights, "
            f"so LOW must be 0"
        )
    return [f"--importance_sampling_cap={high:g}"]


def _expand_yaml(argv: list[str]) -> list[str]:
    """``--config FILE`` with nested sections -> the file's options as flags (before the
    command line's own, which still override them)."""
    for i, a in enumerate(argv):
        path = (
            argv[i + 1]
            if a == "--config" and i + 1 < len(argv)
            else (a.split("=", 1)[1] if a.startswith("--config=") else None)
        )
        if path is None:
            continue
        p, data = read_yaml(path)
        if not any(isinstance(v, dict) for v in data.values()):
            return argv  # a flat file: the parser reads it as always
        flags: list[str] = []
        for key, value in _flatten(data):
            where = f"{p}: option '{key}'"
            if value is None:
                continue  # verl's null: the default
            if isinstance(value, list):
                if "." in key:
                    raise ConfigError(f"{where}: a list has no serl meaning here")
                flags += [f"--{key}", *map(_word, value)]
            elif "." in key:
                flags += _verl(key, _word(value), where)
            else:
                flags += [f"--{key}", _word(value)]
        end = i + (1 if a.startswith("--config=") else 2)
        return flags + argv[:i] + argv[end:]
    return argv


def _flatten(data: dict, prefix: str = ""):
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flatten(v, key + ".")
        else:
            yield key, v


def _word(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
