"""The run: the loop that owns its steps, its hooks, run state, checkpoints and resume."""
