"""The questioner's history memory: a few solved questions per document cluster.

SPELL (Tongyi-Zhiwen 2025) keeps, for each cluster, the last few questions whose responder
mean score was in range, with the paragraphs they came from. The next questioner prompt for
that cluster shows them as examples and asks for a new, harder question, and their evidence
stays in the context while new paragraphs are added (:func:`serl.recipes.spell.corpus.sample_evidence`).

Here: at most ``capacity`` (3, as upstream; 0 keeps none) entries per cluster, first in first
out; an entry is stored when the responder's mean score lies in (0, 1] (the issue's rule;
upstream's default band is [0.5, 1]) and the cluster holds no entry with the same question
(case and spacing ignored). The state is plain JSON, so a resumed run sees the same memory.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryEntry:
    evidence: tuple[int, ...]  # paragraph indices within the cluster
    question: str
    answer: str


def _key(question: str) -> str:
    return " ".join(question.split()).casefold()


class HistoryMemory:
    """Per-cluster FIFO of (evidence, question, answer)."""

    def __init__(self, capacity: int = 3, score_range: tuple[float, float] = (0.0, 1.0)):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 (0: no memory), got {capacity}")
        self.capacity = capacity
        self.score_range = score_range  # (low exclusive, high inclusive)
        self._store: dict[str, deque[MemoryEntry]] = {}

    def add(self, cluster_id: str, evidence, question: str, answer: str, mean_score: float) -> bool:
        """Store the entry if ``low < mean_score <= high`` and the question is new for
        this cluster; the oldest entry goes when the cluster is full. Returns stored."""
        low, high = self.score_range
        if not low < mean_score <= high or self.capacity == 0:
            return False
        entries = self._store.setdefault(cluster_id, deque(maxlen=self.capacity))
        if any(_key(e.question) == _key(question) for e in entries):
            return False
        entries.append(MemoryEntry(tuple(sorted({int(i) for i in evidence})), question, answer))
        return True

    def get(self, cluster_id: str) -> list[MemoryEntry]:
        """Entries for the cluster, oldest first (empty if none)."""
        return list(self._store.get(cluster_id, ()))

    def evidence(self, cluster_id: str) -> list[int]:
        """Union of the paragraph indices behind the cluster's entries, sorted."""
        return sorted({i for e in self._store.get(cluster_id, ()) for i in e.evidence})

    def __len__(self) -> int:
        return sum(len(d) for d in self._store.values())

    def fill(self, n_clusters: int) -> float:
        """Entries held / (n_clusters * capacity): how full the memory is over a corpus."""
        return len(self) / (n_clusters * self.capacity) if n_clusters > 0 and self.capacity > 0 else 0.0

    def state_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "score_range": list(self.score_range),
            "clusters": {
                cid: [{"evidence": list(e.evidence), "question": e.question, "answer": e.answer} for e in d]
                for cid, d in self._store.items()
                if d
            },
        }

    def load_state_dict(self, state: dict) -> None:
        """Replace the contents with ``state`` (from :meth:`state_dict`); checks its shape."""
        if not isinstance(state, dict) or not isinstance(state.get("clusters"), dict):
            raise ValueError("memory state must be a dict with a 'clusters' mapping")
        capacity = state.get("capacity", self.capacity)
        if not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"memory state: bad capacity {capacity!r}")
        store: dict[str, deque[MemoryEntry]] = {}
        for cid, rows in state["clusters"].items():
            if not isinstance(rows, list) or len(rows) > capacity:
                raise ValueError(f"memory state: cluster {cid!r} must hold a list of at most {capacity} entries")
            for k, row in enumerate(rows):
                for key in ("evidence", "question", "answer"):
                    if not isinstance(row, dict) or key not in row:
                        raise ValueError(f"memory state: cluster {cid!r} entry {k} lacks {key!r}")
                ev, q, a = row["evidence"], row["question"], row["answer"]
                if not (
                    isinstance(q, str)
                    and isinstance(a, str)
                    and isinstance(ev, list)
                    and all(isinstance(i, int) for i in ev)
                ):
                    raise ValueError(f"memory state: cluster {cid!r} entry {k} has bad types")
            store[str(cid)] = deque(
                (MemoryEntry(tuple(r["evidence"]), r["question"], r["answer"]) for r in rows), maxlen=capacity
            )
        self.capacity = capacity
        self.score_range = tuple(state.get("score_range", self.score_range))
        self._store = store
