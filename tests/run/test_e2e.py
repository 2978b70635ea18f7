"""Two real steps of the SeRL loop on SmolLM2 with a tiny batch (transformers generator)."""

import json

import pytest
import torch

pytestmark = pytest.mark.slow


def test_two_steps_of_the_loop(tmp_path, smol_path, smol_tokenizer, monkeypatch):
    from serl.config.parser import parse_args
    from serl.engines.causal_lm import load_causal_lm
    from serl.engines.factory import build_engines
    from serl.recipes.serl.recipe import SerlRecipe
    from serl.report.metrics import MetricsLogger
    from serl.run.context import RunContext
    from serl.run.runner import make_checker, prepare

    monkeypatch.chdir(tmp_path.parent)
    cfg, _ = parse_args(
        [
            "--run_dir",
            str(tmp_path / "run"),
            "--generator",
            "hf",
            "--steps",
            "2",
            "--prompt_data",
            str(__import__("pathlib").Path(__file__).parents[2] / "dataset/arith_seed.jsonl"),
            "--rollout_batch_size",
            "2",
            "--n_samples_per_prompt",
            "4",
            "--instructions_num_per_iteration",
            "3",
            "--few_shot_generation_batch_size",
            "2",
            "--few_shot_generation",
            "4",
            "--generate_max_len",
            "48",
            "--instruction_max_len",
            "96",
            "--instruction_max_attempts",
            "2",
            "--max_refill_rounds",
            "1",
            "--reward_difficulty_bounds",
            "0",
            "1",
            "--actor_learning_rate",
            "1e-5",
            "--temperature",
            "1.0",
            "--micro_train_batch_size",
            "4",
            "--progress",
            "quiet",
        ]
    )
    p = prepare(cfg)
    seeds, model_path, run_dir = p.data, p.model_path, p.run_dir
    run_dir.mkdir(parents=True)
    engines = build_engines(cfg, p.plan, model_path, smol_tokenizer, make_checker(cfg))
    gen, learner = engines.generator, engines.learner
    logger = MetricsLogger(run_dir)
    ctx = RunContext(cfg, run_dir, model_path, smol_tokenizer, gen, learner, engines.checker, logger, "quiet")
    trainer = SerlRecipe(ctx, seeds)
    n_seeds = len(trainer.pool)
    try:
        metrics = [trainer.step(1), trainer.step(2)]
        for step, m in enumerate(metrics, 1):
            logger.log(step, m)
    finally:
        trainer.close()
        engines.close()
        logger.close()

    # the pool grew by self-instruction, and the new items are the model's own text
    generated = [i for i in trainer.pool.items() if i.source == "generated"]
    assert len(trainer.pool) > n_seeds and generated
    assert all(i.text not in {s.text for s in seeds} for i in generated)

    # rewards came from real generations: groups of 4, values in {0, 1}, agreement logged
    for m in metrics:
        assert m["reward/groups"] >= 1 and 0.0 <= m["reward/agreement"] <= 1.0
        assert 0.0 <= m["reward/mean"] <= 1.0 and m["response/length_mean"] > 0
        assert m["time/generate"] > 0 and m["time/reward"] > 0
    lines = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [ln["step"] for ln in lines] == [1, 2]

    # the weights changed, and the generator serves exactly the learner's weights
    orig = dict(load_causal_lm(model_path).named_parameters())
    learned = dict(learner.named_weights())
    served = dict(gen.model.named_parameters())
    changed = [n for n in orig if not torch.equal(orig[n], learned[n].float().cpu())]
    assert changed, "no parameter changed after two steps"
    for n in changed:
        assert torch.equal(served[n], learned[n].to(served[n].dtype)), n
