"""Micro-batches: which sequences share a forward pass, and how they are laid out.

- Sequences are sorted by length (longest first) and cut into groups of about
  ``micro_batch_size`` sequences, or, with a token budget (``max_tokens``), into groups
  whose layout holds at most that many tokens (OpenRLHF's dynamic batch, verl's
  ``use_dynamic_bsz``): short sequences then share one long row and the matmuls see as
  many rows as the budget allows. A group of ``units`` (DPO pairs) is never split, and a
  unit longer than the budget gets a micro-batch of its own.
- **Padded** layout: one row per sequence, right-padded to the group's longest, with an
  attention mask. **Packed** layout: the group's sequences concatenated into a single row
  with position ids restarting at 0 for each sequence and the sequence lengths recorded,
  so that attention stays inside each sequence (``serl.engines.varlen``). Packing runs
  no padding tokens and gives the matmuls one long row instead of several short ones.
- **Shared prompts** (``share_prompts``, packed only; the idea of Prefix Grouper,
  arXiv:2506.05433): sequences whose prompt token lists are equal share one copy of the
  prompt in the row, their responses after it, each response's positions continuing
  from the prompt's length; ``Micro.shared`` records
  (prompt length, response lengths) for each prompt written, and ``serl.engines.varlen``
  lets each response attend to its prompt and its own earlier tokens only. The first
  token of every response is predicted from the prompt's last position, which the
  responses share. A micro-batch then holds as many whole units as fit in
  ``size`` times the batch's longest sequence (prompt + response) tokens: no longer a
  row than the per-sequence packing of ``size`` sequences can make, with the prompt
  run once instead of once per response.
- Either way the LM head runs only at the positions that predict response tokens
  (``pred_rows``/``pred_cols``), and the objective sees the response tokens as rows
  ``[b, R]`` (``resp_mask``), so objectives do not care which layout ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor


@dataclass
class Micro:
    """One micro-batch: sequence indices, inputs and response layout."""

    index: list[int]
    input_ids: Tensor  # [b, L] padded, or [1, T] packed
    attention_mask: Tensor | None  # [b, L] padded; None when packed
    resp_mask: Tensor  # [b, R] bool, True on response tokens
    pred_rows: Tensor  # [N] row of each response token's predicting position
    pred_cols: Tensor  # [N] column of that position (one before the token)
    targets: Tensor  # [N] the response token ids, row-major
    lengths: list[int] = field(default_factory=list)  # response lengths
    pairs: Tensor | None = None  # [P, 2] rows of (chosen, rejected), for pair objectives
    position_ids: Tensor | None = None  # [1, T] packed: 0.. within each sequence
    seq_lens: tuple[int, ...] | None = (
        None  # packed: prompt + response length of each sequence (shared: of each prompt's block)
    )
    shared: tuple[tuple[int, tuple[int, ...]], ...] | None = (
        None  # shared prompts: (prompt length, response lengths) per block
    )

    @property
    def packed(self) -> bool:
        return self.seq_lens is not None

    def to(self, device: str) -> Micro:
        if device == "cpu":
            return self
        mv = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return Micro(
            self.index,
            mv(self.input_ids),
            mv(self.attention_mask),
            mv(self.resp_mask),
            mv(self.pred_rows),
            mv(self.pred_cols),
            mv(self.targets),
            self.lengths,
            mv(self.pairs),
            mv(self.position_ids),
            self.seq_lens,
            self.shared,
        )


def micro_batches(
    prompt_ids: list[list[int]],
    response_ids: list[list[int]],
    size: int,
    pad_id: int,
    units: list[list[int]] | None = None,
    pack: bool = False,
    share_prompts: bool = False,
    max_tokens: int = 0,
) -> list[Micro]:
    """Micro-batches of about ``size`` sequences, longest first, padded or ``pack``ed
    (``share_prompts``: packed with each equal prompt written once, see the module doc).
    ``max_tokens`` > 0 replaces the count by a token budget: the tokens the layout holds
    (packed: the sum of the lengths; padded: rows x the longest). ``units`` are groups of
    sequence indices that must share a micro-batch (DPO pairs); default: each alone."""
    if len(prompt_ids) != len(response_ids):
        raise ValueError(f"{len(prompt_ids)} prompts but {len(response_ids)} responses")
    for i, p in enumerate(prompt_ids):
        if not p:
            raise ValueError(
                f"sequence {i}: empty prompt (the first response token needs a position to be predicted from)"
            )
    total = lambda i: len(prompt_ids[i]) + len(response_ids[i])  # noqa: E731
    units = [[i] for i in range(len(prompt_ids))] if units is None else units
    if share_prompts:
        if not pack:
            raise ValueError("share_prompts needs the packed layout (pack=True)")
        return [
            _shared_layout(prompt_ids, response_ids, g)
            for g in _shared_groups(prompt_ids, response_ids, units, size, max_tokens)
        ]
    units = sorted(units, key=lambda u: -max(total(i) for i in u))

    def fits(group: list[list[int]], u: list[int]) -> bool:
        if not max_tokens:
            return sum(map(len, group)) + len(u) <= size
        lens = [total(i) for g in (*group, u) for i in g]
        return (sum(lens) if pack else len(lens) * max(lens)) <= max_tokens

    groups: list[list[list[int]]] = []
    for u in units:
        if groups and fits(groups[-1], u):
            groups[-1].append(u)
        else:
            groups.append([u])
    return [_layout(prompt_ids, response_ids, g, pad_id, pack) for g in groups]


def _layout(prompt_ids, response_ids, group: list[list[int]], pad_id: int, pack: bool) -> Micro:
    idx = [i for u in group for i in u]
    lens = [len(prompt_ids[i]) + len(response_ids[i]) for i in idx]
    rl = [len(response_ids[i]) for i in idx]
    L, R = max(lens), max(rl) if rl else 0
    if pack:
        ids = torch.tensor([[t for i in idx for t in (*prompt_ids[i], *response_ids[i])]], dtype=torch.long)
        att: Any = None
        pos = torch.cat([torch.arange(n) for n in lens])[None]
    else:
        ids = torch.full((len(idx), L), pad_id, dtype=torch.long)
        att = torch.zeros((len(idx), L), dtype=torch.long)
        pos = None
    resp = torch.zeros((len(idx), max(R, 1)), dtype=torch.bool)
    rows: list = []
    cols: list = []
    tgts: list = []
    offset = 0
    for b, i in enumerate(idx):
        p, r = len(prompt_ids[i]), len(response_ids[i])
        if not pack:
            ids[b, : p + r] = torch.tensor(list(prompt_ids[i]) + list(response_ids[i]), dtype=torch.long)
            att[b, : p + r] = 1
        resp[b, :r] = True
        rows.extend([0 if pack else b] * r)
        start = offset + p - 1 if pack else p - 1
        cols.extend(range(start, start + r))
        tgts.extend(response_ids[i])
        offset += p + r
    return Micro(
        idx,
        ids,
        att,
        resp,
        torch.tensor(rows, dtype=torch.long),
        torch.tensor(cols, dtype=torch.long),
        torch.tensor(tgts, dtype=torch.long),
        rl,
        _pairs(group),
        pos,
        tuple(lens) if pack else None,
    )


def _pairs(group: list[list[int]]) -> Tensor | None:
    """Rows (chosen, rejected) of each pair: units are laid out in order, two rows each."""
    if any(len(u) == 2 for u in group):
        return torch.tensor([[2 * k, 2 * k + 1] for k in range(len(group))], dtype=torch.long)
    return None


def _shared_groups(
    prompt_ids, response_ids, units: list[list[int]], size: int, max_tokens: int = 0
) -> list[list[list[int]]]:
    """Units bundled by their first sequence's prompt (bundles longest first, units in
    their given order), cut greedily into micro-batches of at most ``size`` times the
    longest sequence's tokens (or ``max_tokens`` when > 0), counting each prompt once per
    micro-batch; a unit that alone is longer still gets a micro-batch of its own."""
    if not units:
        return []
    total = lambda i: len(prompt_ids[i]) + len(response_ids[i])  # noqa: E731
    budget = max_tokens or size * max(total(i) for u in units for i in u)
    bundles: dict[tuple[int, ...], list[list[int]]] = {}
    for u in units:
        bundles.setdefault(tuple(prompt_ids[u[0]]), []).append(u)
    groups: list[list[list[int]]] = []
    used, seen = 0, set[tuple[int, ...]]()
    for bundle in sorted(bundles.values(), key=lambda b: -max(total(i) for u in b for i in u)):
        for u in bundle:
            prompts, answers = {tuple(prompt_ids[i]) for i in u}, sum(len(response_ids[i]) for i in u)
            cost = lambda: sum(map(len, prompts - seen)) + answers  # noqa: B023 (a prompt already in: free; reads this
            # iteration's prompts and the current seen, on purpose)
            if not groups or used + cost() > budget:
                groups.append([])
                used, seen = 0, set[tuple[int, ...]]()
            groups[-1].append(u)
            used, seen = used + cost(), seen | prompts
    return groups


def _shared_layout(prompt_ids, response_ids, group: list[list[int]]) -> Micro:
    """One packed row: each distinct prompt once (in order of first use), then the
    responses that follow it; response rows (``index``, ``resp_mask``, ``targets``) keep
    the units' order, as the per-sequence layout does."""
    idx = [i for u in group for i in u]
    blocks: dict[tuple[int, ...], list[int]] = {}
    for i in idx:
        blocks.setdefault(tuple(prompt_ids[i]), []).append(i)
    ids: list[int] = []
    pos: list[int] = []
    shared, where = [], {}
    for prompt, members in blocks.items():
        p = len(prompt)
        ids.extend(prompt)
        pos.extend(range(p))
        last = len(ids) - 1  # the prompt's last token predicts every response's first
        for i in members:
            where[i] = (last, len(ids))  # and the response's own tokens from its second on
            ids.extend(response_ids[i])
            pos.extend(range(p, p + len(response_ids[i])))
        shared.append((p, tuple(len(response_ids[i]) for i in members if response_ids[i])))
    rl = [len(response_ids[i]) for i in idx]
    resp = torch.zeros((len(idx), max(max(rl), 1)), dtype=torch.bool)
    cols, tgts = [], []
    for b, i in enumerate(idx):
        resp[b, : rl[b]] = True
        last, first = where[i]
        cols.extend([last, *range(first, first + rl[b] - 1)][: rl[b]])
        tgts.extend(response_ids[i])
    return Micro(
        idx,
        torch.tensor([ids], dtype=torch.long),
        None,
        resp,
        torch.zeros(len(cols), dtype=torch.long),
        torch.tensor(cols, dtype=torch.long),
        torch.tensor(tgts, dtype=torch.long),
        rl,
        _pairs(group),
        torch.tensor([pos], dtype=torch.long),
        tuple(p + sum(rs) for p, rs in shared),
        tuple(shared),
    )


def rank_units(units: list[list[int]], prompt_ids, rank: int, world: int) -> list[list[int]]:
    """Data parallel with shared prompts: this rank's units, a contiguous share of the units
    ordered by their first sequence's prompt (first use first), so that a prompt's
    responses mostly land on one rank and share one copy of it there."""
    first: dict[tuple[int, ...], int] = {}
    for u in units:
        first.setdefault(tuple(prompt_ids[u[0]]), len(first))
    ordered = sorted(units, key=lambda u: first[tuple(prompt_ids[u[0]])])  # stable: given order within
    n = len(ordered)
    return ordered[rank * n // world : (rank + 1) * n // world]


def pad_values(values: list[Tensor], idx: list[int], like: Tensor, what: str, lengths: list[int]) -> Tensor:
    """Per-sequence values (advantages, log-probs) laid out as ``like``'s ``[b, R]`` rows."""
    out = torch.zeros(like.shape, dtype=torch.float32)
    for b, i in enumerate(idx):
        v = torch.as_tensor(values[i], dtype=torch.float32).reshape(-1)
        if v.numel() != lengths[b]:
            raise ValueError(f"TrainBatch.{what}[{i}] has {v.numel()} entries, response has {lengths[b]} tokens")
        out[b, : v.numel()] = v
    return out
