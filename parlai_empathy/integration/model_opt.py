"""A saved model's options (its ``.opt`` file), read without importing ParlAI or any agent.

Agents read an option of the model they resume (:mod:`parlai_empathy.agents.encoder_readout`),
the leaderboard the task and classes of a classifier it evaluates: both only after the model file
was accepted (:func:`parlai_empathy.integration.safe_loading.check_model_trust`), so this is a plain JSON read.
"""

from typing import Dict

from parlai_empathy.files.bounded import FileRefused, load_json_file


def read_model_opt(model_file: str) -> Dict:
    """The options saved beside ``model_file``, read within the caps of an options file; a missing
    ``.opt`` raises ``FileNotFoundError``, anything else that is not an object of options a
    :class:`parlai_empathy.files.bounded.FileRefused` naming the file and line."""
    path = model_file + '.opt'
    opt = load_json_file(path, 'an options file', 'opt_bytes')
    if not isinstance(opt, dict):
        raise FileRefused(path, 1, None, f'not an options file (a JSON {type(opt).__name__}, not an object of options)')
    return opt
