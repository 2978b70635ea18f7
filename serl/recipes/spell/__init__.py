"""SPELL: one policy as questioner, responder and verifier over document clusters.

After Yang et al., "SPELL: Self-Play Reinforcement Learning for Evolving Long-Context
Language Models" (Tongyi-Zhiwen, 2025). Here: the options (:mod:`.config`), the three
roles' prompts (:mod:`.prompts`), the per-cluster history memory (:mod:`.memory`), one
question's life and SPELL's reward mapping (:mod:`.episode`) and the step (:mod:`.recipe`).
Shared parts live in the engine: the corpus reader (:mod:`serl.data.corpus`), answer
scoring (:mod:`serl.rewards.qa`), the judge's majority (:mod:`serl.rewards.judge`), JSON
extraction (:mod:`serl.rewards.json_extract`) and the held-out evaluation
(:mod:`serl.eval.roles`).
"""
