"""The prompt pool: every problem the run knows, with provenance, persisted as events.

Storage is one append-only JSONL file of events in the run directory. Mutations are
applied in memory and buffered; ``flush()`` appends the buffered events followed by a
``commit`` line and fsyncs. ``load()`` replays only committed groups, so a crash in
the middle of a flush (a torn or half-written group) leaves the pool as it was at the
previous flush; the torn tail is cut off before anything new is appended.
Live mutations and replay go through the same ``_apply``, so a reload is exact.
"""

from __future__ import annotations

import json
import logging
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from serl import DataError
from serl.data.seeds import Problem

log = logging.getLogger(__name__)

POOL_FILE = "pool.jsonl"
FORMAT_VERSION = 1
STATUSES = ("pending", "kept", "filtered")


class PoolError(DataError):
    """A pool file that cannot be created or read; the message names file and line."""


@dataclass
class PoolItem:
    id: str
    text: str
    label: str | None
    source: str  # "seed" | "generated"
    step: int  # step it was made (seeds: 0)
    parents: list[str]  # ids of the few-shot examples it was generated from
    status: str  # pending | kept | filtered (seeds are "kept")
    history: list[dict] = field(default_factory=list)  # one entry per rollout
    filter: str | None = None  # which filter set status "filtered"
    reason: str | None = None  # and why
    meta: dict = field(default_factory=dict)

    @property
    def ever_kept(self) -> bool:
        return any(h.get("kept") for h in self.history)


class PromptPool:
    """Seeds and generated problems. Use ``create`` or ``load``, not the constructor.

    A generated problem is ``pending`` until its rollout, then ``kept`` or ``filtered`` by
    the difficulty filter (or a filter of the trainer's own, through ``mark``).
    """

    def __init__(self, path: Path):
        self.path = path
        self._items: dict[str, PoolItem] = {}
        self._order: list[str] = []
        self._n_generated = 0
        self._buffer: list[str] = []  # encoded events not yet flushed

    # ---- construction -------------------------------------------------------------
    @classmethod
    def create(cls, run_dir: str | Path, seeds: list[Problem]) -> PromptPool:
        if not seeds:
            raise ValueError("a prompt pool needs at least one seed problem")
        run_dir = Path(run_dir)
        path = run_dir / POOL_FILE
        if path.exists():
            raise PoolError(f"a prompt pool already exists at {path}; use PromptPool.load to resume")
        run_dir.mkdir(parents=True, exist_ok=True)
        pool = cls(path)
        pool._emit({"e": "header", "version": FORMAT_VERSION})
        for i, p in enumerate(seeds):
            item = PoolItem(
                id=f"s{i}",
                text=p.text,
                label=p.label,
                source="seed",
                step=0,
                parents=[],
                status="kept",
                meta=dict(p.meta),
            )
            pool._emit({"e": "add", "item": asdict(item)})
        pool.flush(step=0)
        _fsync_dir(run_dir)
        return pool

    @classmethod
    def load(cls, run_dir: str | Path, until_step: int | None = None, truncate: bool = True) -> PromptPool:
        """Replay the committed events; with ``until_step``, stop before the first commit
        of a later step (to resume from an older checkpoint) and cut the file there
        (``truncate``; False: only read, as the checks before a resume do).

        A last line without its newline is a torn write and is dropped; any other line
        that is not an event is damage, named by file and line."""
        path = Path(run_dir) / POOL_FILE
        if not path.is_file():
            raise PoolError(f"no prompt pool at {path}")
        raw = path.read_bytes()
        pool = cls(path)
        group: list[tuple[int, dict]] = []
        good_end = 0  # byte offset just past the last commit we applied
        offset, bad_line = 0, None
        for no, line in enumerate(raw.split(b"\n"), 1):
            end = offset + len(line) + 1
            complete = end <= len(raw)  # the file's last piece has no newline: torn
            offset = end
            if not line.strip():
                continue
            try:
                ev = json.loads(line) if complete else None
            except (ValueError, RecursionError):  # bad JSON or UTF-8, or nested too deeply
                ev = None
            if ev is None or not isinstance(ev, dict) or "e" not in ev:
                if complete:
                    raise PoolError(
                        f"{path}:{no}: unreadable pool event (not a JSON object with 'e'); remove "
                        f"that line or restore the file from a copy, then --resume again"
                    )
                bad_line = bad_line or no
                continue
            if bad_line is not None:  # garbage followed by valid events: not a torn tail
                raise PoolError(f"{path}:{bad_line}: unreadable pool event")
            if ev["e"] != "commit":
                group.append((no, ev))
                continue
            step = ev.get("step")
            if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
                raise PoolError(f"{path}:{no}: commit event with step {str(step)[:40]!r}, not an integer")
            if until_step is not None and step is not None and step > until_step:
                break
            for g_no, g in group:
                try:
                    pool._apply(g)
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    raise PoolError(f"{path}:{g_no}: bad pool event ({type(e).__name__}: {str(e)[:200]})") from None
            group = []
            good_end = end
        if not pool._order:
            raise PoolError(f"{path}: no committed pool state (header and seeds missing)")
        if good_end < len(raw) and truncate:
            log.warning(
                "prompt pool %s: dropping %d bytes after the last committed flush (interrupted write or later steps)",
                path,
                len(raw) - good_end,
            )
            with open(path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
        return pool

    # ---- events ---------------------------------------------------------------------
    def _emit(self, ev: dict) -> None:
        line = json.dumps(ev, ensure_ascii=False)
        # Apply a decoded copy: the live state is then exactly what a reload rebuilds,
        # and later in-place changes cannot leak into the buffered event.
        self._apply(json.loads(line))
        self._buffer.append(line)

    def _apply(self, ev: dict) -> None:
        kind = ev["e"]
        if kind == "header":
            if ev["version"] != FORMAT_VERSION:
                raise ValueError(f"pool format version {ev['version']} (this code reads {FORMAT_VERSION})")
        elif kind == "add":
            item = PoolItem(**ev["item"])
            if item.id in self._items:
                raise ValueError(f"duplicate item id {item.id}")
            self._items[item.id] = item
            self._order.append(item.id)
            if item.source == "generated":
                self._n_generated += 1
        elif kind == "rollout":
            item = self._items[ev["id"]]
            item.history.append({k: ev[k] for k in ("step", "agreement", "label", "kept", "reason")})
            if item.source == "generated":
                item.status = "kept" if ev["kept"] else "filtered"
                item.filter, item.reason = (None, None) if ev["kept"] else ("difficulty", ev["reason"])
        elif kind == "status":
            item = self._items[ev["id"]]
            if ev["status"] not in STATUSES:
                raise ValueError(f"unknown status {ev['status']!r}")
            item.status, item.filter, item.reason = ev["status"], ev.get("filter"), ev.get("reason")
        else:
            raise ValueError(f"unknown event kind {kind!r}")

    def flush(self, step: int | None = None) -> None:
        """Append buffered events and a commit line, then fsync: durable on return."""
        if not self._buffer:
            return
        if step is None:
            evs = [json.loads(line) for line in self._buffer]
            step = max(ev.get("step", ev.get("item", {}).get("step", 0)) for ev in evs)
        lines = list(self._buffer)
        lines.append(json.dumps({"e": "commit", "step": step, "n": len(self._buffer)}))
        data = ("\n".join(lines) + "\n").encode("utf-8")
        with open(self.path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        self._buffer.clear()

    # ---- mutations ------------------------------------------------------------------
    def add_generated(self, texts: list[str], step: int, parents: list[list[str]]) -> list[PoolItem]:
        if len(texts) != len(parents):
            raise ValueError(f"{len(texts)} texts but {len(parents)} parent lists")
        out = []
        for text, par in zip(texts, parents):
            unknown = [p for p in par if p not in self._items]
            if unknown:
                raise KeyError(f"unknown parent ids {unknown}")
            item = PoolItem(
                id=f"g{self._n_generated}",
                text=text,
                label=None,
                source="generated",
                step=step,
                parents=list(par),
                status="pending",
            )
            self._emit({"e": "add", "item": asdict(item)})
            out.append(self._items[item.id])
        return out

    def record_rollout(
        self, item_id: str, step: int, agreement: float, label: str | None, kept: bool, reason: str | None
    ) -> None:
        """One rollout's statistics; for generated items it also sets kept/filtered."""
        if item_id not in self._items:
            raise KeyError(f"unknown pool item {item_id}")
        self._emit(
            {
                "e": "rollout",
                "id": item_id,
                "step": step,
                "agreement": float(agreement),
                "label": label,
                "kept": bool(kept),
                "reason": reason,
            }
        )

    def mark(self, item_id: str, status: str, step: int, filter: str | None = None, reason: str | None = None) -> None:
        """Set a status by hand (e.g. a filter of the trainer's own)."""
        if item_id not in self._items:
            raise KeyError(f"unknown pool item {item_id}")
        if status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {status!r}")
        self._emit({"e": "status", "id": item_id, "status": status, "step": step, "filter": filter, "reason": reason})

    # ---- queries --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._order)

    def get(self, item_id: str) -> PoolItem:
        return self._items[item_id]

    def items(self) -> list[PoolItem]:
        return [self._items[i] for i in self._order]

    def seeds(self) -> list[PoolItem]:
        return [it for it in self.items() if it.source == "seed"]

    def generated(self) -> list[PoolItem]:
        return [it for it in self.items() if it.source == "generated"]

    def known_texts(self) -> list[str]:
        """Every text in the pool (seeds, kept, pending, filtered), in the order
        added; the list only grows, so filters can index it incrementally."""
        return [self._items[i].text for i in self._order]

    def fewshot_examples(self, rng: random.Random, k: int, max_generated: int) -> list[PoolItem]:
        """Up to ``max_generated`` generated problems that passed the difficulty filter,
        the rest seeds, shuffled."""
        good = [it for it in self.generated() if it.ever_kept and it.status == "kept"]
        n_gen = min(max_generated, len(good), k)
        picked = rng.sample(good, n_gen)
        seeds = self.seeds()
        picked += rng.sample(seeds, min(k - n_gen, len(seeds)))
        rng.shuffle(picked)
        return picked

    def stats(self) -> dict[str, float]:
        gen = self.generated()
        out = {
            "pool/size": float(len(self)),
            "pool/seeds": float(len(self) - len(gen)),
            "pool/generated": float(len(gen)),
        }
        for s in STATUSES:
            out[f"pool/{s}"] = float(sum(it.status == s for it in gen))
        return out


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
