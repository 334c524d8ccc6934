"""``-m empathy/mime`` (see parlai_empathy.agents.mime)."""

from parlai_empathy.agents.mime import MimeAgent  # noqa: F401
