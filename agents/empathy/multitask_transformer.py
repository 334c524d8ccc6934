"""``-m empathy/multitask_transformer`` (see parlai_empathy.agents.multitask_transformer)."""

from parlai_empathy.agents.multitask_transformer import MultitaskTransformerAgent  # noqa: F401
