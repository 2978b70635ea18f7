"""A safetensors file in shared memory that weight pushes write into in place.

``save_file`` casts every tensor to a new bf16 copy, serialises them all into one bytes
object and writes it out: three passes over the model each push. Here the file is laid
out once (header + data) and mapped; a push is then one ``copy_`` per tensor straight
into its slot, casting on the way. Same file format, so the engine's own safetensors
loader reads it.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable

import torch

_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}


class SafetensorsMirror:
    def __init__(self, path: str, dtype: torch.dtype = torch.bfloat16):
        if dtype not in _DTYPES:
            raise ValueError(f"SafetensorsMirror: dtype {dtype} not one of {list(_DTYPES)}")
        self.path, self.dtype = path, dtype
        self._layout: list[tuple[str, tuple[int, ...]]] | None = None
        self._slots: dict[str, torch.Tensor] = {}
        self._map: torch.Tensor | None = None

    def write(self, named: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Write these tensors (cast to ``dtype``); re-lay the file if names or shapes changed.

        While they match the current layout, each tensor is copied as it arrives and not
        kept: a LoRA learner's merged weights are new tensors, and holding them all until
        the end would cost a second model's worth of memory (1.4 GB for a 0.5B model)."""
        it = iter(named)
        done: list[str] = []
        with torch.no_grad():
            for name, t in it:
                i = len(done)
                if self._layout is None or i >= len(self._layout) or self._layout[i] != (name, tuple(t.shape)):
                    # another layout: what was written already is read back from its slots
                    # (the cast is exact the second time), then everything is laid out anew
                    rest = [(n, self._slots[n]) for n in done] + [(name, t.detach())]
                    rest += [(n, x.detach()) for n, x in it]
                    self._relay(rest)
                    return
                self._slots[name].copy_(t)
                done.append(name)
        if self._layout is None or len(done) != len(self._layout):  # fewer tensors than before
            self._relay([(n, self._slots[n]) for n in done])

    def _relay(self, items: list[tuple[str, torch.Tensor]]) -> None:
        self._lay_out([(n, tuple(t.shape)) for n, t in items])
        with torch.no_grad():
            for name, t in items:
                self._slots[name].copy_(t)

    def _lay_out(self, layout: list[tuple[str, tuple[int, ...]]]) -> None:
        width = torch.tensor([], dtype=self.dtype).element_size()
        header, offset = {}, 0
        for name, shape in layout:
            size = width * _numel(shape)
            header[name] = {"dtype": _DTYPES[self.dtype], "shape": list(shape), "data_offsets": [offset, offset + size]}
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
        start = 8 + len(raw)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(start + offset)
        os.replace(tmp, self.path)
        self._map = torch.from_file(self.path, shared=True, size=start + offset, dtype=torch.uint8)
        self._slots = {}
        for name, shape in layout:
            a, b = header[name]["data_offsets"]
            self._slots[name] = self._map[start + a : start + b].view(self.dtype).view(shape)
        self._layout = layout


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
