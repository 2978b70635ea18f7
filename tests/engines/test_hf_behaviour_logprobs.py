"""The transformers generator's behaviour log-probs: each sampled token's log-prob under the
generating weights equals the learner's log-prob of the same token (same fp32 weights), at the
temperature asked for. A token off by one, or the wrong temperature, would miss by far."""

import pytest
import torch

from serl.engines.base import Sampling
from serl.engines.learner_core import LearnerConfig
from serl.engines.torch_learner import TorchLearner

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_match_the_learner(smol_path, smol_tokenizer, temperature):
    from serl.engines.hf_generator import HFGenerator

    gen = HFGenerator(smol_path, smol_tokenizer, seed=5)
    prompts = [
        [*smol_tokenizer("Count: one, two,", add_special_tokens=False)["input_ids"]],
        [*smol_tokenizer("2 + 2 =", add_special_tokens=False)["input_ids"]],
    ]
    out = gen.generate(
        prompts, 2, Sampling(max_new_tokens=12, temperature=0.9, logprobs=True, logprob_temperature=temperature)
    )
    comps = [c for g in out for c in g]
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.token_ids) for c in comps)
    learner = TorchLearner(smol_path, LearnerConfig(temperature=temperature, micro_batch_size=4), need_ref=False)
    want = learner.logprobs([c.prompt_ids for c in comps], [c.token_ids for c in comps])
    for c, w in zip(comps, want):
        torch.testing.assert_close(torch.tensor(c.logprobs), w, atol=2e-3, rtol=0)
    plain = gen.generate(prompts, 2, Sampling(max_new_tokens=12, temperature=0.9))
    assert all(c.logprobs is None for g in plain for c in g)
