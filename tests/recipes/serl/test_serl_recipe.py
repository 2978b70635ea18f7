"""SerlRecipe.make_batch: which log-prob passes a step pays for, and the advantages it builds."""

from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch

from serl.config.plan import plan_run
from serl.engines.base import Completion
from serl.recipes.serl.config import SerlConfig as TrainConfig
from serl.recipes.serl.instruct.pool import PoolItem
from serl.recipes.serl.recipe import Rollout
from serl.recipes.serl.recipe import SerlRecipe as Trainer
from serl.rewards.vote import GroupScore


class RecordingLearner:
    """Answers logprobs() with fixed values and records which models were asked."""

    def __init__(self, policy: float, ref: float):
        self.values = {"policy": policy, "ref": ref}
        self.calls: list[str] = []

    def logprobs(self, prompt_ids, response_ids, model="policy"):
        self.calls.append(model)
        return [torch.full((len(r),), self.values[model]) for r in response_ids]


def _rollouts() -> list[Rollout]:
    item = PoolItem("q0", "1+1?", None, "seed", 0, [], "kept")
    group = [Completion("2", [5, 6], [1, 2]), Completion("3", [7], [1, 2])]
    score = GroupScore([1.0, 0.0], ["2", "3"], "2", 0.5, 2, 0, False, "majority")
    return [Rollout(item, group, score)]


@pytest.mark.parametrize(
    "kl_coef,kl_loss,estimator,calls",
    [
        (0.0, False, "group_norm", []),  # GRPO without KL: no extra forward
        (1e-4, True, "group_norm", ["ref"]),  # GRPO: KL in the loss needs ref only
        (1e-4, False, "reinforce", ["policy", "ref"]),  # Reinforce++: KL in the reward
    ],
)
def test_old_logprobs_only_when_the_reward_needs_them(kl_coef, kl_loss, estimator, calls):
    cfg = TrainConfig(init_kl_coef=kl_coef, use_kl_loss=kl_loss, advantage_estimator=estimator)
    learner = RecordingLearner(policy=-1.0, ref=-1.5)
    fake = _fake(cfg, learner)
    metrics: dict = {}
    batch = Trainer.make_batch(fake, _rollouts(), metrics)
    assert learner.calls == calls
    assert batch.response_ids == [[5, 6], [7]]
    # the work counted for bench/roofline.py: (2 prompt + 2) + (2 prompt + 1) tokens, per pass
    assert (
        metrics["train/logprob_tokens"],
        metrics["train/logprob_answer_tokens"],
        metrics["train/logprob_passes"],
        metrics["train/tokens"],
    ) == (7, 3, len(calls), 7)
    assert (batch.old_logprobs is None) == ("policy" not in calls)
    assert (batch.ref_logprobs is not None) == kl_loss
    if calls == ["policy", "ref"]:
        # k1 = log pi - log ref = 0.5 per token, as a penalty on the reward
        assert metrics["kl/mean"] == pytest.approx(0.5)
        # Reinforce++ return at token t: reward at the last token minus kl_coef * 0.5 for
        # every token from t on (gamma 1); then whitened over the batch's 3 tokens
        raw = torch.tensor([1.0 - 2 * 0.5e-4, 1.0 - 0.5e-4, 0.0 - 0.5e-4])
        want = (raw - raw.mean()) / (raw.std(unbiased=False) + 1e-8)  # population std
        got = torch.cat(batch.advantages)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4)
    else:
        assert "kl/mean" not in metrics


def _fake(cfg, learner):
    return SimpleNamespace(cfg=cfg, plan=plan_run(cfg), learner=learner, timed=lambda name: nullcontext())


def test_train_batch_size_leaves_the_old_logprobs_to_the_learner():
    """Mini-batches are the learner's (serl.engines.learner_core): the recipe scores nothing
    for them, and hands over one batch."""
    cfg = TrainConfig(init_kl_coef=0.0, advantage_estimator="group_norm", train_batch_size=1)
    learner = RecordingLearner(policy=-1.0, ref=-1.5)
    batch = Trainer.make_batch(_fake(cfg, learner), _rollouts(), {})
    assert learner.calls == [] and batch.old_logprobs is None and batch.response_ids == [[5, 6], [7]]


def test_schedule_spans_every_update():
    from serl.config.plan import plan_run
    from serl.engines.factory import learner_config
    from serl.recipes.serl.config import updates_per_step

    cfg = TrainConfig(steps=10, rollout_batch_size=16, n_samples_per_prompt=16, train_batch_size=16)
    assert updates_per_step(cfg) == 16 and learner_config(cfg, plan_run(cfg)).total_steps == 160  # SeRL's templates
    assert updates_per_step(TrainConfig(rollout_batch_size=4, n_samples_per_prompt=4, train_batch_size=0)) == 1
    assert updates_per_step(TrainConfig(rollout_batch_size=3, n_samples_per_prompt=3, train_batch_size=4)) == 3
