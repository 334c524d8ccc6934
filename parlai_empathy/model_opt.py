"""A saved model's options (its ``.opt`` file), read without importing ParlAI or any agent.

Agents read an option of the model they resume (:mod:`parlai_empathy.agents.encoder_readout`),
the leaderboard the task and classes of a classifier it evaluates: both only after the model file
was accepted (:func:`parlai_empathy.safe_loading.check_model_trust`), so this is a plain JSON read.
"""
import json
from typing import Dict


def read_model_opt(model_file: str) -> Dict:
    """The options saved beside ``model_file``; a missing ``.opt`` raises ``FileNotFoundError``."""
    with open(model_file + '.opt') as f:
        return json.load(f)
