"""ParlAI agents over the plain models in ``parlai_empathy.models``."""
