"""SeRL's name for the rule reward file: the same reward as ``math_rule_reward.py``
(the response's answer checked against the label with math-verify).

    --remote_rm_url /path/to/reward_utils/math_verify_reward.py

SeRL's README passes this name; serl keeps one implementation and this file re-exports it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from math_rule_reward import reward_func  # noqa: E402,F401
