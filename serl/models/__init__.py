"""Models: resolving a model spec, the opt-in models' parts, and chat token ids."""
