"""Prompt text for one turn of a SPIRAL game (our wording; the format follows SPIRAL, Liu et al., 2025:
the observation, then reasoning and the action in ``\\boxed{}``).

The prompt is plain text; the caller applies the model's chat template.
"""

from __future__ import annotations

from .base import Game

INSTRUCTION = (
    "Think about the game step by step, then give your move as one of the legal actions, written "
    "without the square brackets inside \\boxed{}"
)


def strip_brackets(action: str) -> str:
    return action[1:-1] if action.startswith("[") and action.endswith("]") else action


def render_prompt(
    game: Game, player: int | None = None, *, show_legal_actions: bool = True, example: bool = True
) -> str:
    """The prompt for ``player`` (default: the player to move): observation, legal actions, instruction.

    With ``example`` the instruction shows the format on the last legal action (``\\boxed{bet}``), which
    helps small models get the format right but is a nudge towards that move; ``example=False`` shows
    the format alone."""
    player = game.current_player if player is None else player
    legal = game.legal_actions()
    parts = [game.observation(player)]
    if show_legal_actions and legal:
        parts.append("Legal actions: " + ", ".join(legal))
    tail = f", for example \\boxed{{{strip_brackets(legal[-1])}}}." if (example and legal) else "."
    parts.append(INSTRUCTION + tail)
    return "\n\n".join(parts)
