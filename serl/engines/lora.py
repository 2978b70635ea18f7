"""LoRA adapters for the learners, through ``peft`` (Hu et al. 2021, arXiv:2106.09685).

With ``LearnerConfig.lora_rank > 0`` a learner trains low-rank adapters on the frozen
base model instead of all its weights; ``LoraAdapter`` holds what both learners share:

- The adapter is added in place (``peft.get_peft_model``): the learner's model object
  stays the Hugging Face model, its target linears now carrying ``lora_A``/``lora_B``.
  Only those are trainable, so the optimizer holds only their moments.
- The reference model is the same base with the adapter switched off (peft's
  ``disable_adapter``), never a second copy. After ``sync_ref`` (recipes that refresh the
  reference, such as SPIN) it is the base plus a frozen snapshot of the adapter, swapped
  in for the reference pass and swapped back after it.
- ``merged_weights`` yields every weight under the base model's Hugging Face names with
  the adapter folded in, ``W + (alpha/r)·B·A`` per target (one fused ``addmm``), computed
  out of place: the
  learner's own weights and adapter do not change, and generators (transformers, vLLM)
  receive a plain model. We push merged weights rather than use vLLM's LoRA support
  because the same path then serves every generator and backend (vLLM's CPU backend
  and the transformers generator have no adapter hot-swap of their own).
- ``save`` writes the adapter in PEFT layout (``adapter_config.json``,
  ``adapter_model.safetensors``; loadable with ``PeftModel.from_pretrained``) plus
  ``lora_state.pt``: the LoRA settings, the reference snapshot and the base model's
  identity, so that ``load`` refuses an adapter trained on another base.
- LoRA dropout acts in the update passes only; log-prob scoring runs without it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch
from torch import Tensor

from serl.engines.lora_targets import parse_targets

ADAPTER = "default"  # peft's name for the one adapter a learner trains
STATE_FILE = "lora_state.pt"
_SAMPLE = 1 << 16  # bytes read at the start, middle and end of each weights file
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")

Gather = Callable[..., AbstractContextManager]  # (params, modify=False) -> context manager making them whole (ZeRO-3)


def _no_gather(params: list, modify: bool = False):
    return nullcontext()


def lora_settings(cfg) -> dict:
    """The settings that define an adapter (a checkpoint must match them to load)."""
    return {
        "rank": int(cfg.lora_rank),
        "alpha": float(cfg.lora_alpha),
        "dropout": float(cfg.lora_dropout),
        "target_modules": parse_targets(cfg.target_modules),
    }


def base_identity(model_path: str) -> dict:
    """The base model's path and a fingerprint: its config.json text plus, for each weights
    file, its name, its size and 64 KiB read at its start, middle and end (cheap even for
    large models, and enough to tell two fine-tunes of one architecture apart)."""
    p = Path(model_path)
    h = hashlib.sha256()
    if not p.is_dir():  # a hub id: only the name is known without downloading
        h.update(str(model_path).encode())
        return {"path": str(model_path), "fingerprint": h.hexdigest()[:20]}
    conf = p / "config.json"
    if conf.is_file():
        h.update(conf.read_bytes())
    for f in sorted(p.iterdir()):
        if f.is_file() and f.name.endswith(_WEIGHT_SUFFIXES):
            size = f.stat().st_size
            h.update(f"{f.name}\0{size}\n".encode())
            with open(f, "rb") as fh:
                for at in (0, max(0, size // 2 - _SAMPLE // 2), max(0, size - _SAMPLE)):
                    fh.seek(at)
                    h.update(fh.read(_SAMPLE))
    return {"path": str(p.resolve()), "fingerprint": h.hexdigest()[:20]}


class LoraAdapter:
    """A trainable LoRA adapter on ``lm`` (modified in place); see the module docstring."""

    def __init__(self, lm, cfg, model_path: str):
        from peft import LoraConfig, get_peft_model

        from serl import ConfigError

        self.settings = lora_settings(cfg)
        s = self.settings
        conf = LoraConfig(
            r=s["rank"],
            lora_alpha=s["alpha"],
            lora_dropout=s["dropout"],
            target_modules=s["target_modules"],
            bias="none",
            task_type="CAUSAL_LM",
        )
        try:
            self.peft = get_peft_model(lm, conf)
        except ValueError as e:  # peft: "Target modules {...} not found in the base model"
            raise ConfigError(f"target_modules: {e}") from None
        self.lm = lm  # the same object, now with LoRA layers
        self.identity = base_identity(model_path)
        self.ref_adapter: dict[str, Tensor] | None = None  # None: the reference is the bare base
        self._layers = {n: m for n, m in lm.named_modules() if _is_lora_layer(m)}
        self._dropouts = [m for n, m in lm.named_modules() if n.split(".")[-2:-1] == ["lora_dropout"]]

    # ---------------------------------------------------------------- parameters
    def adapter_params(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The trainable adapter parameters, in a fixed order (names as in ``lm``)."""
        return [(n, p) for n, p in self.lm.named_parameters() if _is_lora_name(n)]

    def num_trainable(self) -> int:
        return sum(getattr(p, "ds_numel", p.numel()) for _, p in self.adapter_params())

    # ---------------------------------------------------------------- reference
    def sync_ref(self, gather: Gather = _no_gather) -> None:
        """The reference becomes the current policy: base + a snapshot of the adapter."""
        snap = {}
        for n, p in self.adapter_params():
            with gather([p]):
                snap[n] = p.detach().to("cpu", copy=True)
        self.ref_adapter = snap

    def cast_base(self, dtype: torch.dtype) -> None:
        """Store every frozen weight in ``dtype`` (autocast's compute type) and keep the
        adapter's input in it. Frozen weights are not in autocast's cast cache, so fp32 ones
        were cast again in every pass (the tied LM head alone is vocab x hidden), and an fp32
        embedding and norms kept the residual stream fp32, so every linear re-cast its input.
        The model then computes as the full-weight bf16 learner does; the adapter stays fp32
        (the optimizer's masters) and autocast casts it once per pass."""
        with torch.no_grad():
            for p in self.lm.parameters():
                if p.is_floating_point() and not p.requires_grad:
                    p.data = p.data.to(dtype)
        for layer in self._layers.values():
            layer.cast_input_dtype_enabled = False  # peft would cast x up to the adapter's fp32

    @contextmanager
    def as_reference(self, gather: Gather = _no_gather):
        """Inside: the model computes the reference (adapter off, or the snapshot in)."""
        if self.ref_adapter is None:
            with self.peft.disable_adapter():
                yield
            return
        params = self.adapter_params()
        live = {}
        with torch.no_grad():
            for n, p in params:
                with gather([p], modify=True):
                    live[n] = p.detach().to("cpu", copy=True)
                    p.data.copy_(self.ref_adapter[n])
        try:
            yield
        finally:
            with torch.no_grad():
                for n, p in params:
                    with gather([p], modify=True):
                        p.data.copy_(live[n])

    @contextmanager
    def no_dropout(self):
        """LoRA dropout off (scoring passes), restored after."""
        drops = [m for m in self._dropouts if m.training]
        for m in drops:
            m.eval()
        try:
            yield
        finally:
            for m in drops:
                m.train()

    # ---------------------------------------------------------------- merged weights
    @torch.no_grad()
    def merged_weights(self, gather: Gather = _no_gather, clone: bool = False) -> Iterator[tuple[str, Tensor]]:
        """Every weight under the base model's HF names, adapters folded in out of place.

        Targets yield a new tensor ``W + delta``; other weights are the live parameters
        (copies when ``clone``: ZeRO-3 frees the gathered storage afterwards). A tied LM
        head is listed once, as the model's ``named_parameters`` does.
        """
        for name, p in self.lm.named_parameters():
            if _is_lora_name(name):
                continue
            parts = name.split(".")
            if "base_layer" not in parts:
                with gather([p]):
                    yield name, (p.detach().clone() if clone else p.detach())
                continue
            i = parts.index("base_layer")
            owner, leaf = ".".join(parts[:i]), ".".join(parts[i + 1 :])
            layer = self._layers[owner]
            if leaf != "weight" or ADAPTER not in layer.lora_A:
                with gather([p]):
                    yield f"{owner}.{leaf}", (p.detach().clone() if clone else p.detach())
                continue
            A, B = layer.lora_A[ADAPTER].weight, layer.lora_B[ADAPTER].weight
            with gather([p, A, B]):
                yield f"{owner}.{leaf}", _merge(p.detach(), A, B, layer.scaling[ADAPTER], layer.fan_in_fan_out)

    # ---------------------------------------------------------------- save / load
    def peft_state_dict(self, gather: Gather = _no_gather) -> dict[str, Tensor]:
        """The adapter's weights under PEFT's file names (CPU copies)."""
        from peft import get_peft_model_state_dict

        params = [p for _, p in self.adapter_params()]
        with gather(params):
            sd = get_peft_model_state_dict(self.peft, adapter_name=ADAPTER)
            return {k: v.detach().to("cpu", copy=True) for k, v in sd.items()}

    def save(self, path: str, gather: Gather = _no_gather, write: bool = True, state: bool = True) -> None:
        """Adapter in PEFT layout plus ``lora_state.pt`` (unless ``state`` is False: the final
        model) into ``path`` (which must exist). Collective under ZeRO-3; only the caller
        with ``write`` writes files."""
        sd = self.peft_state_dict(gather)
        if not write:
            return
        self.peft.save_pretrained(path, state_dict=sd, save_embedding_layers=False)
        if state:
            torch.save(
                {"settings": self.settings, "identity": self.identity, "ref_adapter": self.ref_adapter},
                Path(path) / STATE_FILE,
            )

    def check(self, path: str) -> dict:
        """``lora_state.pt`` of a saved adapter, after refusing one that does not fit here."""
        f = Path(path) / STATE_FILE
        if not f.is_file():
            raise FileNotFoundError(
                f"{path}: not a LoRA learner checkpoint (no {STATE_FILE}; was it saved with lora_rank 0?)"
            )
        state = torch.load(f, map_location="cpu", weights_only=False)
        saved, now = state["identity"], self.identity
        if saved["fingerprint"] != now["fingerprint"]:
            raise ValueError(
                f"{path}: the adapter was trained on base model {saved['path']} "
                f"(fingerprint {saved['fingerprint']}), but this learner's base is "
                f"{now['path']} (fingerprint {now['fingerprint']}); refusing to load "
                f"it onto a different base"
            )
        if state["settings"] != self.settings:
            raise ValueError(
                f"{path}: the adapter has LoRA settings {json.dumps(state['settings'])}, "
                f"this learner {json.dumps(self.settings)}"
            )
        return state

    def load(self, path: str, gather: Gather = _no_gather, weights: bool = True) -> None:
        """Restore the adapter (unless ``weights`` is False: DeepSpeed loads its own) and
        the reference snapshot from ``save``; refuses another base or other settings."""
        state = self.check(path)
        if weights:
            self.load_adapter(path, gather)
        self.ref_adapter = state["ref_adapter"]

    def load_adapter(self, path: str, gather: Gather = _no_gather) -> None:
        """The adapter weights of ``save`` alone (also of ``state=False``, which has no
        ``lora_state.pt``: the reference snapshot stays as it is)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        f = Path(path) / "adapter_model.safetensors"
        if not f.is_file():
            raise FileNotFoundError(f"{path}: no adapter_model.safetensors")
        sd = load_file(str(f))
        want = self.peft_state_dict(gather)
        bad = sorted(set(want) ^ set(sd)) or [k for k in want if want[k].shape != sd[k].shape]
        if bad:
            raise ValueError(f"{path}: adapter weights do not match this model ({bad[:3]})")
        params = [p for _, p in self.adapter_params()]
        with gather(params, modify=True):
            set_peft_model_state_dict(self.peft, sd, adapter_name=ADAPTER)

    @torch.no_grad()
    def export_merged(self, path: str, tokenizer=None, gather: Gather = _no_gather, write: bool = True) -> None:
        """The merged model in Hugging Face layout (as ``from_pretrained`` reads it)."""
        sd = {n: t.detach().to("cpu", copy=True) for n, t in self.merged_weights(gather)}
        if not write:
            return
        self.lm.save_pretrained(path, state_dict=sd)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)


@torch.no_grad()
def merge_saved_adapter(adapter_dir: str | Path, base: str, dest: str | Path) -> None:
    """A saved adapter (``save``'s PEFT layout) folded into ``base`` and written to ``dest`` in
    Hugging Face layout, with the tokenizer saved beside the adapter (else the base's): the
    weights ``export_merged`` would have written at that step (fp32 base, the same fused
    ``_merge``), for a checkpoint whose run ended without a merged model (stopped, or
    evaluated mid-run)."""
    from safetensors.torch import load_file

    from serl.engines.causal_lm import load_causal_lm
    from serl.models.resolve import tokenizer_for_save

    src = Path(adapter_dir)
    cfg = json.loads((src / "adapter_config.json").read_text())
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise ValueError(f"{src / 'adapter_config.json'}: per-layer ranks or alphas are not merged here")
    scale = cfg["lora_alpha"] / (cfg["r"] ** 0.5 if cfg.get("use_rslora") else cfg["r"])
    if (src / STATE_FILE).is_file():  # serl's own adapters record their base: refuse another
        saved = torch.load(src / STATE_FILE, map_location="cpu", weights_only=False)["identity"]
        if saved["fingerprint"] != base_identity(base)["fingerprint"]:
            raise ValueError(
                f"{src}: the adapter was trained on base model {saved['path']}, not {base}; "
                "refusing to merge it into a different base"
            )
    tensors = load_file(str(src / "adapter_model.safetensors"))
    lm = load_causal_lm(base, dtype=torch.float32)
    modules = dict(lm.named_modules())
    for key, a in tensors.items():
        if ".lora_B." in key:
            continue
        owner = key.split(".lora_A.")[0].removeprefix("base_model.model.")
        if ".lora_A." not in key or owner not in modules:
            raise ValueError(f"{src / 'adapter_model.safetensors'}: {key} is not a LoRA factor of {base}")
        w = modules[owner].weight
        w.data = _merge(
            w.data, a, tensors[key.replace(".lora_A.", ".lora_B.")], scale, cfg.get("fan_in_fan_out", False)
        )
    lm.save_pretrained(str(dest))
    tok = tokenizer_for_save(None, str(src) if (src / "tokenizer_config.json").exists() else base)
    if tok is not None:
        tok.save_pretrained(str(dest))


def _merge(w: Tensor, a: Tensor, b: Tensor, scale: float, transposed: bool) -> Tensor:
    """``w + scale * (b @ a)`` in one fused op (fp32 when ``w`` is 16-bit), as a new tensor;
    ``transposed`` for weights stored (in, out) such as GPT-2's Conv1D."""
    x, y = (a.T, b.T) if transposed else (b, a)
    if w.dtype in (torch.float16, torch.bfloat16):
        return torch.addmm(w.float(), x.float(), y.float(), alpha=scale).to(w.dtype)
    return torch.addmm(w, x.to(w.dtype), y.to(w.dtype), alpha=scale)


def _is_lora_name(name: str) -> bool:
    return any(part.startswith("lora_") for part in name.split("."))


def _is_lora_layer(module) -> bool:
    from peft.tuners.lora import LoraLayer

    return isinstance(module, LoraLayer)


class ReferenceNet:
    """The reference scorer under LoRA: ``net``'s forward inside ``adapter.as_reference``."""

    def __init__(self, net, adapter: LoraAdapter, gather: Gather = _no_gather):
        self.net, self.adapter, self.gather = net, adapter, gather

    def __call__(self, *args):
        with self.adapter.as_reference(self.gather):
            return self.net(*args)
