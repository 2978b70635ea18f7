"""The run: the loop that owns it, its step frames and hooks, run state, checkpoints and resume."""
