"""``-m empathy/ethreed`` (see parlai_empathy.agents.ethreed)."""

from parlai_empathy.agents.ethreed import EthreedAgent  # noqa: F401
