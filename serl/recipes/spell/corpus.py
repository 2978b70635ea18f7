"""Read a document corpus (a folder or a file) into clusters of paragraphs.

Self-play over documents needs text cut into small groups: SPELL (Tongyi-Zhiwen 2025)
shows its questioner a few paragraphs of a cluster and its responder the whole cluster,
distractors included. This module turns any text into such clusters:

* **Text files** (``.txt``, ``.md``, ``.rst``, ``.text``, ``.man``, or a rendered man
  page with no suffix): paragraphs are blocks separated by blank lines. Inside a
  paragraph, spaces are collapsed and line breaks kept.
* **JSONL** (``.jsonl``; a single ``.json`` file given directly is read as JSONL too,
  but in a folder ``.json`` files are ignored, being mostly plain JSON): each row's ``text_key``
  (default ``text``) is a document, split into paragraphs the same way. When
  ``cluster_key`` (default ``cluster``) is present in a row, rows sharing its value
  form one group (the generated corpus of :mod:`serl.recipes.spell.docs` is read this way).
* **Parquet** (``.parquet``): each row's ``text_key`` column is a document and
  ``cluster_key`` groups rows, as for JSONL (only those two columns are read). SPELL's
  own layout (Tongyi-Zhiwen's ``dataset/*/train.parquet``: one cluster a row, its
  documents a list of strings in ``paragraphs``, with ``question_id``) reads with
  ``text_key="paragraphs"``: a list-valued text is the row's documents, grouped as one
  cluster (by ``cluster_key`` when given, else by row).
* **A folder**: every file above, recursively, in sorted path order; hidden files and
  other suffixes are ignored, files that are not UTF-8 (or not readable Parquet) are
  skipped and counted.

Paragraphs shorter than ``min_chars`` (headings such as ``NAME`` in a man page) are
joined to the paragraph after them. Paragraphs longer than ``max_tokens`` (measured
with the ``count_tokens`` callable) or ``max_chars`` are skipped and counted in
:class:`CorpusStats`, never a crash.

Grouping: paragraphs without a cluster value are taken in order (files sorted, so
neighbouring paragraphs come from the same file) in runs of ``cluster_size``; a
group from the cluster key larger than ``cluster_size`` is cut into consecutive runs
of ``cluster_size`` too. The last run may be shorter.

Errors (:class:`CorpusError`) name the path, and the line (JSONL, text) or row
(Parquet) and key.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from serl.data.jsonl import jsonl_objects, read_utf8
from serl.shipped import locate

TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text", ".man")
JSONL_SUFFIXES = (".jsonl", ".json")
PARQUET = ".parquet"
_BLANK = re.compile(r"\n[ \t]*\n+")
_SPACES = re.compile(r"[ \t\f\v\r]+")


class CorpusError(ValueError):
    """Bad corpus input; the message names the path (and line and key for JSONL)."""


@dataclass
class Cluster:
    """Paragraphs that go into one responder prompt, with where each came from."""

    id: str
    paragraphs: list[str]
    sources: list[str]


@dataclass
class CorpusStats:
    files: int = 0
    documents: int = 0
    paragraphs: int = 0
    skipped_long: int = 0
    skipped_unreadable: int = 0
    unreadable_files: list[str] = field(default_factory=list)
    long_at: list[str] = field(default_factory=list)  # where the first skipped long paragraphs were

    def as_dict(self) -> dict:
        return {
            "files": self.files,
            "documents": self.documents,
            "paragraphs": self.paragraphs,
            "skipped_long": self.skipped_long,
            "skipped_unreadable": self.skipped_unreadable,
        }


@dataclass
class Corpus:
    clusters: list[Cluster]
    stats: CorpusStats


def split_paragraphs(text: str, min_chars: int = 20) -> list[str]:
    """Blank-line separated blocks, spaces collapsed; short blocks joined to the next."""
    out: list[str] = []
    carry = ""
    for block in _BLANK.split(text.replace("\r\n", "\n")):
        lines = [_SPACES.sub(" ", ln).strip() for ln in block.split("\n")]
        para = "\n".join(ln for ln in lines if ln)
        if not para:
            continue
        para = f"{carry}\n{para}" if carry else para
        if len(para) < min_chars:
            carry = para
            continue
        carry = ""
        out.append(para)
    if carry:  # a short block at the very end still counts as text
        if out:
            out[-1] = f"{out[-1]}\n{carry}"
        else:
            out.append(carry)
    return out


def _list_files(root: Path) -> list[Path]:
    files = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        if p.suffix.lower() in TEXT_SUFFIXES + (".jsonl", PARQUET) or p.suffix == "":
            files.append(p)
    return files


def _read_text(p: Path, stats: CorpusStats, strict: bool) -> str | None:
    try:
        return read_utf8(p, CorpusError)
    except CorpusError:
        if strict:
            raise
        stats.skipped_unreadable += 1
        stats.unreadable_files.append(str(p))
        return None
    except OSError as e:
        raise CorpusError(f"{p}: cannot read ({e})") from e


def _parquet_rows(p: Path, text_key: str, cluster_key: str | None, stats: CorpusStats, strict: bool):
    """(source, row) per row of a Parquet file, reading only the text and cluster columns;
    None for an unreadable file in a folder (skipped and counted)."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise CorpusError(f"{p}: reading Parquet needs pyarrow (pip install pyarrow)") from e
    try:
        names = pq.read_schema(p).names
        if text_key not in names:
            hint = (
                " (SPELL's layout: --corpus_text_key paragraphs --corpus_cluster_key question_id)"
                if "paragraphs" in names
                else ""
            )
            raise CorpusError(f"{p}: no column '{text_key}' (columns: {', '.join(names[:8])}); set the text key{hint}")
        cols = [text_key] + ([cluster_key] if cluster_key in names and cluster_key != text_key else [])
        rows = pq.read_table(p, columns=cols).to_pylist()
    except CorpusError:
        raise
    except Exception as e:
        if strict:
            raise CorpusError(f"{p}: not a readable Parquet file ({e})") from e
        stats.skipped_unreadable += 1
        stats.unreadable_files.append(str(p))
        return None
    return [(f"{p}: row {i}", row) for i, row in enumerate(rows)]


def _jsonl_docs(p: Path, text: str, text_key: str, cluster_key: str | None):
    return _row_docs(((f"{p}:{no}", row) for no, row in jsonl_objects(p, CorpusError, text)), text_key, cluster_key)


def _row_docs(rows, text_key: str, cluster_key: str | None):
    """(document text, cluster value or None, source) per (source, row) of JSONL or Parquet."""
    for where, row in rows:
        if text_key not in row:
            keys = ", ".join(sorted(map(str, row))[:8])
            raise CorpusError(f"{where}: missing key '{text_key}' (keys present: {keys}); set the text key")
        doc = row[text_key]
        many = isinstance(doc, (list, tuple))  # SPELL's parquet: a row's documents as a list
        for k, d in enumerate(doc if many else [doc]):
            if not isinstance(d, str):
                item = f" item {k}" if many else ""
                raise CorpusError(f"{where}: key '{text_key}'{item} must be a string, got {type(d).__name__}")
        group = where if many else None  # a row of documents is one cluster
        if cluster_key and row.get(cluster_key) not in (None, ""):
            group = row[cluster_key]
            if not isinstance(group, (str, int)) or isinstance(group, bool):
                raise CorpusError(
                    f"{where}: key '{cluster_key}' must be a string or integer, got {type(group).__name__}"
                )
            group = str(group)
        for d in doc if many else [doc]:
            yield d, group, where


def read_corpus(
    path: str | Path,
    *,
    cluster_size: int = 6,
    text_key: str = "text",
    cluster_key: str | None = "cluster",
    min_chars: int = 20,
    max_tokens: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
    max_chars: int = 20000,
) -> Corpus:
    """Read ``path`` (a file or a folder) into clusters; see the module docstring."""
    if cluster_size < 1:
        raise CorpusError(f"cluster_size must be >= 1, got {cluster_size}")
    if max_tokens is not None and count_tokens is None:
        raise CorpusError("max_tokens needs a count_tokens callable")
    root = locate(path)
    if not root.exists():
        raise CorpusError(f"corpus not found: {root}")
    stats = CorpusStats()
    if root.is_dir():
        files, strict = _list_files(root), False
    else:
        files, strict = [root], True
    # (paragraph, group or None, source); group None = chunk by position
    items: list[tuple[str, str | None, str]] = []
    for p in files:
        if p.suffix.lower() == PARQUET:
            rows = _parquet_rows(p, text_key, cluster_key, stats, strict)
            if rows is None:
                continue
            docs = _row_docs(rows, text_key, cluster_key)
        else:
            text = _read_text(p, stats, strict)
            if text is None:
                continue
            docs = (
                _jsonl_docs(p, text, text_key, cluster_key)
                if p.suffix.lower() in JSONL_SUFFIXES
                else [(text, None, str(p))]
            )
        stats.files += 1
        for doc, group, where in docs:
            stats.documents += 1
            for para in split_paragraphs(doc, min_chars):
                if len(para) > max_chars or (
                    max_tokens is not None and count_tokens is not None and count_tokens(para) > max_tokens
                ):
                    stats.skipped_long += 1
                    if len(stats.long_at) < 3:
                        stats.long_at.append(f"{where} ({len(para)} characters)")
                    continue
                items.append((para, group, where))
    stats.paragraphs = len(items)
    if not items:
        why = (
            f"; {stats.skipped_long} paragraph(s) skipped as longer than the budget, first at {stats.long_at[0]}"
            if stats.skipped_long
            else ""
        )
        looked = f"{len(files)} file(s) with suffixes {', '.join(TEXT_SUFFIXES)}, .jsonl, .parquet or none"
        raise CorpusError(f"{root}: empty corpus, no paragraphs found (looked at {looked}){why}")
    return Corpus(clusters=_group(items, cluster_size), stats=stats)


def _group(items: list[tuple[str, str | None, str]], size: int) -> list[Cluster]:
    groups: dict[str, list[tuple[str, str]]] = {}
    loose: list[tuple[str, str]] = []
    for para, group, where in items:
        (groups.setdefault(group, []) if group is not None else loose).append((para, where))
    clusters: list[Cluster] = []
    used: set[str] = set()
    for name, rows in list(groups.items()) + [("", loose)]:
        for k in range(0, len(rows), size):
            chunk = rows[k : k + size]
            cid = name if name and len(rows) <= size else f"{name or 'chunk'}#{k // size}"
            while cid in used:  # ids key the history memory, so they must be unique
                cid += "+"
            used.add(cid)
            clusters.append(Cluster(cid, [r[0] for r in chunk], [r[1] for r in chunk]))
    return clusters


def sample_evidence(n_paragraphs: int, k: int, rng: random.Random, keep: list[int] | tuple[int, ...] = ()) -> list[int]:
    """Paragraph indices for one questioner prompt: ``keep`` (e.g. the history's evidence)
    plus up to ``k`` new ones from the rest, sorted.

    With history, SPELL grows the questioner's context this way: past evidence stays
    and new paragraphs join it, so later questions can span more text.
    """
    kept = sorted({i for i in keep if 0 <= i < n_paragraphs})
    taken = set(kept)
    rest = [i for i in range(n_paragraphs) if i not in taken]
    new = rng.sample(rest, min(k, len(rest)))
    return sorted(kept + new)


def fit_clusters(clusters: list[Cluster], count_tokens: Callable[[str], int], budget: int) -> list[Cluster]:
    """Split clusters whose paragraphs together take more than ``budget`` tokens into
    consecutive parts that fit (ids ``ID/0``, ``ID/1``, ...), so every responder prompt
    stays within the prompt budget. A single paragraph over the budget raises: the
    reader's ``max_tokens`` should have skipped it."""
    out: list[Cluster] = []
    for c in clusters:
        sizes = [count_tokens(p) for p in c.paragraphs]
        if sum(sizes) <= budget:
            out.append(c)
            continue
        parts: list[list[int]] = [[]]
        used = 0
        for i, n in enumerate(sizes):
            if n > budget:
                raise CorpusError(f"{c.sources[i]}: a paragraph of {n} tokens exceeds the budget of {budget}")
            if parts[-1] and used + n > budget:
                parts.append([])
                used = 0
            parts[-1].append(i)
            used += n
        out += [
            Cluster(f"{c.id}/{k}", [c.paragraphs[i] for i in idx], [c.sources[i] for i in idx])
            for k, idx in enumerate(parts)
        ]
    return out
