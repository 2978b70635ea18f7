"""SPELL: one policy as questioner, responder and verifier over document clusters.

After Yang et al., "SPELL: Self-Play Reinforcement Learning for Evolving Long-Context
Language Models" (Tongyi-Zhiwen, 2025). Here: the options (:mod:`.config`), the three
roles' prompts (:mod:`.prompts`), the per-cluster history memory (:mod:`.memory`), one
question's life (:mod:`.episode`) and the step (:mod:`.recipe`). Shared parts live in the
engine: the corpus (:mod:`serl.data.corpus`), the warm-up's pairs (:mod:`serl.data.verify_pairs`),
rewards (:mod:`serl.rewards.qa`, ``.judge``, ``.difficulty``, ``.json_extract``), the roles'
batches joined into one (:mod:`serl.recipes.spell.role_batch`) and the held-out evaluation (:mod:`serl.eval.roles`).
"""
