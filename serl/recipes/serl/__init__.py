"""The SeRL recipe: self-instruction, majority-vote reward, difficulty filter (see recipe.py)."""
