"""The experiment's arms: a name and the `serl train` flags that make each one (None: no training).
They differ only in --enable_self_evolution and --reward_mode."""

ARMS = {
    "a": ("SeRL: self-instruction + majority vote", ["--enable_self_evolution", "true", "--reward_mode", "majority"]),
    "b": ("majority vote, seed problems only", ["--enable_self_evolution", "false", "--reward_mode", "majority"]),
    "c": ("rule reward, seed labels (reference)", ["--enable_self_evolution", "false", "--reward_mode", "rule"]),
    "d": ("no training", None),
}
