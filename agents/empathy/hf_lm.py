"""``-m empathy/hf_lm`` (see parlai_empathy.agents.hf_lm)."""

from parlai_empathy.agents.hf_lm import HfLmAgent  # noqa: F401
