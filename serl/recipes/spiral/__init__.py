"""SPIRAL: self-play on two-player zero-sum text games (Liu et al., 2025, "SPIRAL: Self-Play on Zero-Sum
Games Incentivizes Reasoning via Multi-Agent Multi-Turn Reinforcement Learning").

Everything here is SPIRAL's own: its options (config.py), the trainer (recipe.py), the games with
their prompts, action parsing, lockstep play and Kuhn exploitability (games/), role-conditioned
advantages (rae.py), weight snapshots (snapshots.py) and the snapshot population (population.py), its
per-game, per-role statistics (stats.py) and the game evaluation (evaluate.py, also ``serl eval --games``)."""
