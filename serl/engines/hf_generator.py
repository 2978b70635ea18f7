"""Generation with transformers' ``generate``: always available, slow, reproducible."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from serl.engines.base import Completion, Sampling
from serl.models import chat


class HFGenerator:
    """Implements ``Generator`` with a model of its own (or one shared with a learner).

    Prompts are token ids (``serl.models.chat``: untrusted text stays plain text) or final text
    (chat template already applied), fed as they are.
    Sampling is seeded from ``seed`` and a call counter, so a run is reproducible.
    """

    def __init__(
        self,
        model_path: str,
        tokenizer=None,
        seed: int = 0,
        model=None,
        batch_size: int = 32,
        dtype: torch.dtype = torch.float32,
        device: str | None = None,
    ):
        from serl.engines.causal_lm import load_causal_lm
        from serl.models.resolve import load_tokenizer

        self.tokenizer = tokenizer or load_tokenizer(model_path)
        if model is None:  # a model of its own goes to the GPU when there is one; a shared one stays put
            model = load_causal_lm(model_path, dtype=dtype)
            model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model
        self.model.eval()
        self.device = str(next(model.parameters()).device.type)
        self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")  # the start line names it
        self.seed = seed
        self.calls = 0
        self.batch_size = batch_size

    def _stop_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(im_end, int) and im_end != self.tokenizer.unk_token_id:
            ids.add(im_end)
        return [i for i in ids if i is not None]

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        tok = self.tokenizer
        self.calls += 1
        torch.manual_seed(self.seed * 1_000_003 + self.calls if sampling.seed is None else sampling.seed)
        stop_ids = self._stop_ids()
        out: list[list[Completion]] = []
        n_eff = 1 if sampling.greedy else n
        per_batch = max(1, self.batch_size // max(1, n_eff))
        for start in range(0, len(prompts), per_batch):
            chunk = prompts[start : start + per_batch]
            enc = [chat.prompt_ids(tok, p) for p in chunk]
            width = max(map(len, enc))
            pad = tok.pad_token_id
            ids = torch.tensor([[pad] * (width - len(e)) + e for e in enc])  # left padding
            attn = torch.tensor([[0] * (width - len(e)) + [1] * len(e) for e in enc])
            kwargs = dict(
                max_new_tokens=sampling.max_new_tokens,
                eos_token_id=stop_ids,
                pad_token_id=pad,
                num_return_sequences=n_eff,
            )
            if sampling.greedy:
                kwargs.update(do_sample=False)
            else:
                kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
            if sampling.stop:
                kwargs.update(stop_strings=list(sampling.stop), tokenizer=tok)
            dev = self.model.device
            rec = _SampledLogprobs(sampling.logprob_temperature) if sampling.logprobs else None
            if rec is not None:
                kwargs.update(logits_processor=[rec])
            gen = self.model.generate(input_ids=ids.to(dev), attention_mask=attn.to(dev), **kwargs)[:, width:]
            lps = rec.finish(gen) if rec is not None else None
            for i, prompt_ids in enumerate(enc):
                group = []
                for j in range(n_eff):
                    row = gen[i * n_eff + j].tolist()
                    finish = "length"
                    for k, t in enumerate(row):
                        if t in stop_ids:
                            row, finish = row[: k + 1], "stop"
                            break
                    text = tok.decode(row, skip_special_tokens=True)
                    if sampling.stop:
                        for s in sampling.stop:
                            if s in text:
                                text, finish = text[: text.index(s)], "stop"
                    group.append(
                        Completion(
                            text=text,
                            token_ids=row,
                            prompt_ids=prompt_ids,
                            finish_reason=finish,
                            logprobs=None if lps is None else lps[i * n_eff + j, : len(row)].tolist(),
                        )
                    )
                if n_eff < n:  # greedy: one decode serves all n
                    group = [group[0]] * n
                out.append(group)
        return out

    def state_dict(self) -> dict:
        return {"calls": self.calls}  # sampling is seeded by seed and this count

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state.get("calls", 0))

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = dict(self.model.named_parameters())
        for name, t in named_tensors:
            if name in params and params[name].data_ptr() != t.data_ptr():
                params[name].copy_(t.to(params[name].dtype))  # copy_ crosses devices

    def close(self) -> None:
        pass


class _SampledLogprobs:
    """A logits processor that keeps each sampled token's log-prob under the raw logits / ``temperature``.

    Custom processors run before transformers' temperature and top-p, so the scores seen are the
    model's logits. The token sampled from one call's scores is the last input id of the next call;
    the last one is read after ``generate`` returns (``finish``). One [rows, vocab] tensor is held.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self.last: torch.Tensor | None = None
        self.taken: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.last is not None:
            self.taken.append(self.last.gather(1, input_ids[:, -1:]).squeeze(1))
        self.last = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, gen: torch.Tensor) -> torch.Tensor:
        """[rows, generated] log-probs of ``gen``'s tokens (pad after a stop: ignored by callers)."""
        if self.last is not None and len(self.taken) < gen.shape[1]:
            self.taken.append(
                self.last.gather(1, gen[:, len(self.taken) : len(self.taken) + 1].to(self.last.device)).squeeze(1)
            )
        self.last = None
        return torch.stack(self.taken, 1).cpu() if self.taken else torch.zeros(gen.shape[0], 0)
