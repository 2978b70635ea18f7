"""Rows from Hugging Face ``datasets`` sources, for ``read_seeds`` (``--prompt_data``).

Three kinds of source, tried in this order:

- a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``
  (recognised by its ``dataset_dict.json`` or ``state.json``), read with ``load_from_disk``;
- any other local file or folder that ``datasets.load_dataset`` can read (JSON Lines,
  JSON, CSV, Parquet, Arrow files, or a folder of them);
- a hub id such as ``openai/gsm8k``, optionally with a config after a colon
  (``openai/gsm8k:main``), fetched with ``load_dataset``.

Before fetching a hub id we ask the hub about it with a short timeout, because
``load_dataset`` retries a dead network for about half a minute; with no network
the user gets a clear error naming the id in well under that. With
``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE`` set, only the local ``datasets`` cache is used.

Every failure is a ``DataError`` that names the source (and split).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from serl import DataError

HUB_TIMEOUT_S = 10.0
# Local files read by a datasets packaged builder (JSONL/Parquet files have their own readers).
FILE_BUILDERS = {
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
    ".arrow": "arrow",
}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?(:[\w.-]+)?$")


def looks_like_hub_id(source: str) -> bool:
    """``name``, ``owner/name`` or ``owner/name:config``, and not a data file name."""
    s = str(source)
    return bool(_HUB_ID.match(s)) and Path(s.split(":")[0]).suffix.lower() not in FILE_BUILDERS


def is_saved_dataset(path: Path) -> bool:
    """A folder written by ``save_to_disk`` (DatasetDict or Dataset)."""
    return path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file())


def _datasets():
    try:
        import datasets
    except ImportError as e:  # a dependency of serl; only a broken install gets here
        raise DataError("reading Hugging Face datasets needs the 'datasets' package (pip install datasets)") from e
    return datasets


def _offline() -> bool:
    return any(
        os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
        for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def _hub_probe(repo_id: str) -> None:
    """Ask the hub whether ``repo_id`` exists; raises what huggingface_hub raises."""
    from huggingface_hub import HfApi

    HfApi().dataset_info(repo_id, timeout=HUB_TIMEOUT_S)


def _check_hub(source: str, repo_id: str) -> None:
    try:
        _hub_probe(repo_id)
    except Exception as e:
        name = type(e).__name__
        if name in ("RepositoryNotFoundError", "GatedRepoError", "HFValidationError"):
            raise DataError(
                f"{source}: no local file or folder of that name, and the "
                f"Hugging Face hub has no dataset '{repo_id}' that we may read "
                f"({name})"
            ) from e
        raise DataError(
            f"{source}: no local file or folder of that name, and the Hugging "
            f"Face hub could not be reached to fetch dataset '{repo_id}' "
            f"({name}: {e}); pass a local file or a save_to_disk folder, or "
            f"run where the hub is reachable"
        ) from e


def _pick_split(obj, source: str, split: str):
    """One split from a Dataset/DatasetDict; a lone Dataset only answers to its own split."""
    datasets = _datasets()
    if isinstance(obj, datasets.DatasetDict):
        if split not in obj:
            raise DataError(f"{source}: no split '{split}' (splits: {', '.join(obj)}); choose one with --prompt_split")
        return obj[split]
    own = str(obj.split) if getattr(obj, "split", None) is not None else "train"
    if split not in (own, "train"):
        raise DataError(f"{source}: a single dataset (split '{own}'), not a dataset with a split '{split}'")
    return obj


def _load(datasets, p: Path, where: str, split: str):
    if is_saved_dataset(p):
        return datasets.load_from_disk(str(p))
    if p.is_dir():
        return datasets.load_dataset(str(p))
    if p.is_file():
        builder = FILE_BUILDERS.get(p.suffix.lower())
        if builder is None:
            raise DataError(
                f"{where}: unknown data file type '{p.suffix}' (expected one of {', '.join(sorted(FILE_BUILDERS))})"
            )
        return datasets.load_dataset(builder, data_files=str(p))
    if not looks_like_hub_id(where):
        raise DataError(f"seed file not found: {where}")
    repo_id, _, config = where.partition(":")
    if _offline():
        try:
            return datasets.load_dataset(repo_id, config or None, split=split)
        except Exception as e:
            raise DataError(
                f"{where}: no local file or folder of that name, and with "
                f"HF_HUB_OFFLINE/HF_DATASETS_OFFLINE set only the local datasets "
                f"cache is searched for dataset '{repo_id}' ({type(e).__name__}: "
                f"{str(e)[:300]})"
            ) from e
    _check_hub(where, repo_id)
    return datasets.load_dataset(repo_id, config or None, split=split)  # only this split


def load_hf_dataset(source: str | Path, split: str = "train"):
    """The ``split`` of ``source`` as a ``datasets.Dataset`` (see the module doc for sources)."""
    datasets = _datasets()
    where = str(source)
    bars_were_on = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # serl prints its own progress; restored below
    try:
        obj = _load(datasets, Path(source), where, split)
    except DataError:
        raise
    except Exception as e:  # datasets raises many types; all mean "cannot read this"
        if "corresponds to no data" in str(e):  # datasets' words for a file without rows
            raise DataError(f"{where}: split '{split}' is empty (no rows)") from e
        raise DataError(f"{where}: not readable as a Hugging Face dataset ({type(e).__name__}: {str(e)[:300]})") from e
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
    ds = _pick_split(obj, where, split)
    if len(ds) == 0:
        raise DataError(f"{where}: split '{split}' is empty")
    return ds


def read_hf_rows(
    source: str | Path, split: str = "train", max_samples: int | None = None, required: tuple[str, ...] = ()
) -> list[dict]:
    """Rows (dicts) of one split, the first ``max_samples`` of them when given.

    ``required`` columns are checked once, before any row is converted, so that a
    wrong key is reported with the columns that are there.
    """
    ds = load_hf_dataset(source, split)
    missing = [c for c in required if c and c not in ds.column_names]
    if missing:
        raise DataError(
            f"{source} (split '{split}'): missing column '{missing[0]}' "
            f"(columns present: {', '.join(ds.column_names[:12])}); "
            f"set --input_key / --output_key"
        )
    if max_samples:
        ds = ds.select(range(min(max_samples, len(ds))))
    return ds.to_list()
