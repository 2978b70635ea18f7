"""SPELL: one policy as questioner, responder and verifier over document clusters.

After Yang et al., "SPELL: Self-Play Reinforcement Learning for Evolving Long-Context
Language Models" (Tongyi-Zhiwen, 2025). The pure parts live here: the corpus reader
(:mod:`.corpus`), the reward rules (:mod:`.rewards`), JSON extraction from model text
(:mod:`.parse`), the per-cluster history memory (:mod:`.memory`) and the three roles'
prompts (:mod:`.prompts`).
"""
