"""SPELL: one policy as questioner, responder and verifier over document clusters.

After Yang et al., "SPELL: Self-Play Reinforcement Learning for Evolving Long-Context
Language Models" (Tongyi-Zhiwen, 2025). Here: the options (:mod:`.config`), the three
roles' prompts (:mod:`.prompts`), the per-cluster history memory (:mod:`.memory`), one
question's life (:mod:`.episode`) and the step (:mod:`.recipe`). Also SPELL's alone, so here too:
the document corpus (:mod:`.corpus`; :mod:`.docs` and :mod:`.local_docs` write corpus files), the
warm-up's pairs (:mod:`.verify_pairs`, :mod:`.warmup`), the rewards (:mod:`.qa`, :mod:`.judge`,
:mod:`.difficulty`, :mod:`.json_extract`), the roles' batches joined into one (:mod:`.role_batch`)
and the held-out evaluation (:mod:`.evaluate`). From the shared packages it uses the engines, the
novelty index (:mod:`serl.data.novelty`) and the math equivalence checker (:mod:`serl.rewards`).
"""
