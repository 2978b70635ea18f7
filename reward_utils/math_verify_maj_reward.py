"""SeRL's name for the majority-vote reward file: the same reward as
``majority_vote_reward.py`` (read its doc for OpenRLHF 0.11's per-sample calls).

    --remote_rm_url /path/to/reward_utils/math_verify_maj_reward.py

SeRL's README passes this name; serl keeps one implementation and this file re-exports it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from majority_vote_reward import reward_func  # noqa: E402,F401
