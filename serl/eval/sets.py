"""The held-out math problems a training run evaluates on: ``--eval_data`` (labelled
problems, read as seed data is) and ``--eval_benchmarks`` under ``--eval_data_dir``."""

from __future__ import annotations

from serl import ConfigError, DataError
from serl.data.seeds import read_seeds
from serl.shipped import locate


def load_eval_sets(cfg) -> list:
    """Held-out labelled problems (--eval_data) and benchmark files, as eval problems."""
    from serl.eval.data import DataError as EvalDataError
    from serl.eval.data import MathProblem, load_math_benchmark

    problems = []
    if cfg.eval_data:
        split = eval_split(cfg)
        try:
            rows = read_seeds(
                cfg.eval_data, cfg.input_key, cfg.label_key or None, limit=cfg.eval_samples or None, split=split
            )
        except DataError as e:  # the data readers name --prompt_split; here it is --eval_split
            raise DataError(str(e).replace("--prompt_split", "--eval_split")) from e
        unlabelled = [i for i, r in enumerate(rows) if r.label is None]
        if unlabelled:
            raise DataError(
                f"{cfg.eval_data}: row {unlabelled[0] + 1} has no '{cfg.label_key}' (held-out problems need labels)"
            )
        problems += [
            MathProblem(benchmark="heldout", idx=i, question=r.text, gold=str(r.label), where=r.where)
            for i, r in enumerate(rows)
        ]
    names = [n.strip() for n in cfg.eval_benchmarks.split(",") if n.strip()]
    if names and not cfg.eval_data_dir:
        raise ConfigError("eval_benchmarks: needs --eval_data_dir")
    try:
        for name in names:
            problems += load_math_benchmark(cfg.eval_data_dir, name, cfg.eval_limit or None)
    except EvalDataError as e:
        raise DataError(str(e)) from e
    return problems


def eval_split(cfg) -> str:
    """--eval_split, or by default: a single file or a saved single Dataset has one split
    ('train', read whole); dataset folders with splits and hub ids give their 'test' split."""
    if cfg.eval_split:
        return cfg.eval_split
    p = locate(cfg.eval_data)
    one = p.is_file() or (p.is_dir() and (p / "state.json").is_file() and not (p / "dataset_dict.json").is_file())
    return "train" if one else "test"
