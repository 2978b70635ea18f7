"""The SeRL recipe: self-instruction, majority-vote reward, difficulty filter (see recipe.py).

Self-instruction and the prompt pool (``instruct/``, also the ``serl instruct`` command) are SeRL's own."""
