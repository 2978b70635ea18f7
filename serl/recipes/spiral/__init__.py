"""SPIRAL: self-play on two-player zero-sum text games (Liu et al., 2025, "SPIRAL: Self-Play on Zero-Sum
Games Incentivizes Reasoning via Multi-Agent Multi-Turn Reinforcement Learning").

The recipe keeps what is SPIRAL's own: its options (config.py), the trainer (recipe.py), the snapshot
population (population.py) and its per-game, per-role statistics (stats.py). It builds on the engine:
the games, prompts, action parsing, lockstep play and Kuhn exploitability (``serl.games``), role-conditioned
advantages (``serl.algos.rae``), weight snapshots (``serl.engines.snapshots``) and the game evaluation
(``serl.eval.games``)."""
