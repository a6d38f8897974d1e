"""Small helpers for writing scripted-model tests that read like usage."""

from dsh.testing._scripting import (
    call,
    last_user_text,
    model,
    prompt_behaviour_model,
    steps_in_turn,
)

__all__ = ["call", "last_user_text", "model", "prompt_behaviour_model", "steps_in_turn"]
