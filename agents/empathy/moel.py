"""``-m empathy/moel`` (see parlai_empathy.agents.moel)."""

from parlai_empathy.agents.moel import MoelAgent  # noqa: F401
