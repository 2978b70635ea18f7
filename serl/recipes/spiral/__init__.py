"""SPIRAL: self-play on two-player zero-sum text games (Liu et al., 2025, "SPIRAL: Self-Play on Zero-Sum
Games Incentivizes Reasoning via Multi-Agent Multi-Turn Reinforcement Learning").

Model-free parts: the games, action parsing, prompts, role-conditioned advantage estimation (RAE), the
snapshot population, a lockstep episode runner and Kuhn Poker exploitability."""
